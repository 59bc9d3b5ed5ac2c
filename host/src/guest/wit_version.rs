//! Why a module's imports name versions of the `reconciled:runtime` package this host cannot
//! serve: a newer one, or an incompatible one. Asked when a module fails to link, so that its
//! author reads both versions instead of a linker error about a missing import.
//!
//! Where it may surprise: it is not asked of a module that links. One built against a newer
//! 0.1.x that uses nothing this host lacks (a new SDK, no new import called) links, through
//! wasmtime's semver-aware linker, and runs.

use semver::Version;

/// The package every reconciler imports from.
pub const PACKAGE: &str = "reconciled:runtime";

/// The version of the package this host serves: `wit/runtime.wit`'s.
pub const SERVED: &str = "0.1.3";

/// Why a module's imports do not fit this host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// Built against a newer version of the package than this host serves.
    #[error(
        "it was built against {PACKAGE}@{wanted} (it imports {import}), newer than the {PACKAGE}@{SERVED} this host serves; upgrade the host, or build the module against {SERVED} or older"
    )]
    Newer {
        /// The import that says so.
        import: String,
        /// The version it asks for.
        wanted: String,
    },
    /// Built against a version that cannot run here: another major version (or, before 1.0,
    /// another minor), or no version at all.
    #[error(
        "it imports {import}, which this host cannot serve: it serves {PACKAGE}@{SERVED}, and runs modules built against any older version compatible with it; build the module against wit/runtime.wit"
    )]
    Incompatible {
        /// The import.
        import: String,
    },
}

/// Checks the import names of a component (`reconciled:runtime/cache@0.1.0`, `wasi:io/…`):
/// whether every import from [`PACKAGE`] is of a version semver-compatible with [`SERVED`] and
/// not newer. Imports from other packages are not this check's business.
pub fn check<'a>(imports: impl IntoIterator<Item = &'a str>) -> Result<(), Mismatch> {
    let served = Version::parse(SERVED).expect("SERVED is a version");
    for import in imports {
        let Some(rest) = import
            .strip_prefix(PACKAGE)
            .and_then(|r| r.strip_prefix('/'))
        else {
            continue;
        };
        let incompatible = || Mismatch::Incompatible {
            import: import.to_string(),
        };
        let (_, version) = rest.split_once('@').ok_or_else(incompatible)?;
        let wanted = Version::parse(version).map_err(|_| incompatible())?;
        if compatibility(&wanted) != compatibility(&served) {
            return Err(incompatible());
        }
        if wanted > served {
            return Err(Mismatch::Newer {
                import: import.to_string(),
                wanted: version.to_string(),
            });
        }
    }
    Ok(())
}

/// What must match for two versions to be compatible, as the component model's semver rules
/// (and wasmtime's linker) have it: the major version, or before 1.0 the minor one too.
fn compatibility(v: &Version) -> (u64, u64) {
    if v.major == 0 {
        (0, v.minor)
    } else {
        (v.major, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_served_version_is_the_wit_packages() {
        let wit = include_str!("../../../wit/runtime.wit");
        assert!(
            wit.contains(&format!("package {PACKAGE}@{SERVED};")),
            "wit/runtime.wit and SERVED disagree"
        );
    }

    #[test]
    fn modules_built_against_this_version_or_an_older_compatible_one_run() {
        let imports = [
            "wasi:io/streams@0.2.6",
            "reconciled:runtime/types@0.1.0",
            "reconciled:runtime/cache@0.1.0",
        ];
        assert_eq!(check(imports), Ok(()));
        assert_eq!(
            check([format!("{PACKAGE}/settings@{SERVED}").as_str()]),
            Ok(())
        );
    }

    #[test]
    fn a_newer_module_is_refused_naming_both_versions() {
        let e = check([
            "reconciled:runtime/cache@0.1.0",
            "reconciled:runtime/cache@0.1.9",
        ])
        .unwrap_err();
        assert_eq!(
            e,
            Mismatch::Newer {
                import: "reconciled:runtime/cache@0.1.9".into(),
                wanted: "0.1.9".into()
            }
        );
        let message = e.to_string();
        assert!(
            message.contains("@0.1.9") && message.contains(SERVED),
            "{message}"
        );
    }

    #[test]
    fn another_minor_before_1_0_or_no_version_is_incompatible() {
        for import in [
            "reconciled:runtime/cache@0.2.0",
            "reconciled:runtime/cache@0.0.9",
            "reconciled:runtime/cache",
            "reconciled:runtime/cache@x",
        ] {
            assert!(
                matches!(check([import]), Err(Mismatch::Incompatible { .. })),
                "{import}"
            );
        }
    }
}
