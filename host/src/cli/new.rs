//! `reconciled new <name> --lang rust|ts|python|go`: a reconciler project that builds with one
//! command (`./build.sh`, into `dev/<name>.wasm`), tests its logic without a cluster, and runs
//! with `reconciled dev dev`: the reconciler, a CRD for a new kind, a sample object, a test and
//! a short README.
//!
//! Where it may surprise: the SDKs are not published packages yet, so the project refers to
//! them in a reconciled checkout (`--sdk`, by default the one this binary was built from): the
//! Rust crate by path, the Go module by a `replace`, the TypeScript, Python and Go toolchains
//! through their `build.sh`. A Rust project starts from the example's `Cargo.lock` (a Go project
//! from the SDK's `go.sum`), so it builds with the dependency versions the SDK is tested with
//! (and, with a shared `CARGO_TARGET_DIR`, reuses their compiled code).

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

/// The project's language.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Lang {
    /// Rust, with `guests/sdk`.
    Rust,
    /// TypeScript, with `guests/js` (componentize-js).
    Ts,
    /// Python, with `guests/python` (componentize-py).
    Python,
    /// Go, with `guests/go` (standard Go for wasip1, then wasm-tools).
    Go,
}

/// `reconciled new`.
#[derive(Args)]
pub(crate) struct NewArgs {
    /// The project's name: a DNS label (lowercase letters, digits, '-'); also the guest's name.
    name: String,
    /// Its language.
    #[arg(long, value_enum, default_value = "rust")]
    lang: Lang,
    /// The kind it reconciles, `group/version/Kind` [<name>.example.com/v1alpha1/<Name>].
    #[arg(long)]
    kind: Option<String>,
    /// Where to write it [./<name>]; must not exist, or be empty.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The reconciled checkout whose SDKs it uses [the one this binary was built from].
    #[arg(long)]
    sdk: Option<PathBuf>,
}

/// What the templates' `{{…}}` stand for.
#[derive(Debug, PartialEq, Eq)]
struct Names {
    name: String,
    krate: String,
    group: String,
    version: String,
    kind: String,
    singular: String,
    plural: String,
    sdk: String,
}

impl Names {
    fn new(name: &str, kind: Option<&str>, sdk: &Path) -> anyhow::Result<Names> {
        let label = |s: &str| {
            !s.is_empty()
                && s.len() <= 63
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !s.starts_with('-')
                && !s.ends_with('-')
                && s.as_bytes()[0].is_ascii_lowercase()
        };
        if !label(name) {
            anyhow::bail!(
                "{name:?} is not a usable project name: use lowercase letters, digits and '-', starting with a letter (it names the guest, the crate and the file)"
            );
        }
        let pascal: String = name
            .split('-')
            .map(|w| {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            })
            .collect();
        let (group, version, kind) = match kind {
            None => (
                format!("{name}.example.com"),
                "v1alpha1".to_string(),
                pascal,
            ),
            Some(text) => {
                let parts: Vec<&str> = text.split('/').collect();
                let [group, version, kind] = parts[..] else {
                    anyhow::bail!(
                        "--kind {text:?} is not group/version/Kind (for example apps.example.com/v1alpha1/Widget)"
                    );
                };
                if !group.contains('.')
                    || !group.split('.').all(label)
                    || !label(version)
                    || !kind.starts_with(|c: char| c.is_ascii_uppercase())
                    || !kind.chars().all(|c| c.is_ascii_alphanumeric())
                {
                    anyhow::bail!(
                        "--kind {text:?}: a custom resource's group is a DNS name with a dot, its version a DNS label and its kind CamelCase letters and digits"
                    );
                }
                (group.to_string(), version.to_string(), kind.to_string())
            }
        };
        // Names the templates (and the SDKs) use for their own types and imports.
        const TAKEN: [&str; 10] = [
            "Status",
            "Spec",
            "Reconcile",
            "Request",
            "Outcome",
            "Description",
            "Kind",
            "Gvk",
            "Result",
            "Error",
        ];
        if TAKEN.contains(&kind.as_str()) {
            anyhow::bail!(
                "the kind {kind:?} would clash with a type of the generated code; name the kind with --kind (for example {group}/{version}/My{kind})"
            );
        }
        let singular = kind.to_ascii_lowercase();
        let plural = plural_of(&singular);
        Ok(Names {
            name: name.to_string(),
            krate: name.replace('-', "_"),
            group,
            version,
            kind,
            singular,
            plural,
            sdk: sdk.display().to_string(),
        })
    }

    /// Fills `template` in; the SDK path goes into shell, TOML and JSON text, so it must need
    /// no quoting in any of them.
    fn fill(&self, template: &str) -> String {
        template
            .replace("{{name}}", &self.name)
            .replace("{{crate}}", &self.krate)
            .replace("{{group}}", &self.group)
            .replace("{{version}}", &self.version)
            .replace("{{Kind}}", &self.kind)
            .replace("{{singular}}", &self.singular)
            .replace("{{plural}}", &self.plural)
            .replace("{{sdk}}", &self.sdk)
            .replace("{{dev_profile}}", &dev_profile_args())
    }
}

/// cargo's arguments for the profile `reconciled dev --build` rebuilds a Rust guest in, quoted
/// for a shell: the scaffold's `build.sh` builds that profile too, so that the first edit under
/// `dev --build` compiles the crate alone, not its dependencies.
fn dev_profile_args() -> String {
    reconciled::sources::dev_build::dev_profile()
        .iter()
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// English plurals as Kubernetes users write them: policy → policies, gateway → gateways,
/// box → boxes, patch → patches.
fn plural_of(singular: &str) -> String {
    let vowel_before_y = singular
        .strip_suffix('y')
        .and_then(|stem| stem.chars().last())
        .is_some_and(|c| "aeiou".contains(c));
    if let Some(stem) = singular.strip_suffix('y')
        && !vowel_before_y
    {
        format!("{stem}ies")
    } else if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|e| singular.ends_with(e))
    {
        format!("{singular}es")
    } else {
        format!("{singular}s")
    }
}

/// The project's files: path, template, executable.
fn files(lang: Lang) -> Vec<(&'static str, &'static str, bool)> {
    let mut files = vec![
        ("crd.yaml", include_str!("templates/crd.yaml"), false),
        ("sample.yaml", include_str!("templates/sample.yaml"), false),
        (
            ".gitignore",
            "/target\n/dev\n/kubeconfig\n__pycache__/\n",
            false,
        ),
    ];
    files.extend(match lang {
        Lang::Rust => vec![
            ("README.md", include_str!("templates/README.rust.md"), false),
            ("Cargo.toml", include_str!("templates/Cargo.toml"), false),
            ("src/lib.rs", include_str!("templates/lib.rs"), false),
            ("build.sh", include_str!("templates/build.rust.sh"), true),
        ],
        Lang::Ts => vec![
            ("README.md", include_str!("templates/README.ts.md"), false),
            ("src/index.ts", include_str!("templates/index.ts"), false),
            ("src/status.ts", include_str!("templates/status.ts"), false),
            (
                "test/status.test.ts",
                include_str!("templates/status.test.ts"),
                false,
            ),
            (
                "tsconfig.json",
                include_str!("templates/tsconfig.json"),
                false,
            ),
            ("build.sh", include_str!("templates/build.ts.sh"), true),
            ("test.sh", include_str!("templates/test.ts.sh"), true),
        ],
        Lang::Python => vec![
            (
                "README.md",
                include_str!("templates/README.python.md"),
                false,
            ),
            ("app.py", include_str!("templates/app.py"), false),
            ("status.py", include_str!("templates/status.py"), false),
            (
                "test_status.py",
                include_str!("templates/test_status.py"),
                false,
            ),
            ("build.sh", include_str!("templates/build.python.sh"), true),
            ("test.sh", include_str!("templates/test.python.sh"), true),
        ],
        // `.tmpl`: no Go tool mistakes a template for source.
        Lang::Go => vec![
            ("README.md", include_str!("templates/README.go.md"), false),
            ("go.mod", include_str!("templates/go.mod.tmpl"), false),
            ("main.go", include_str!("templates/main.go.tmpl"), false),
            ("status.go", include_str!("templates/status.go.tmpl"), false),
            (
                "status_test.go",
                include_str!("templates/status_test.go.tmpl"),
                false,
            ),
            ("build.sh", include_str!("templates/build.go.sh"), true),
            ("test.sh", include_str!("templates/test.go.sh"), true),
        ],
    });
    files
}

/// The checkout this binary was built from, if it is still there; never, for a binary built
/// without the `checkout` feature (the image's).
#[cfg(not(feature = "checkout"))]
fn default_sdk() -> Option<PathBuf> {
    None
}

/// The checkout this binary was built from, if it is still there.
#[cfg(feature = "checkout")]
fn default_sdk() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    root.join("guests/sdk/Cargo.toml")
        .is_file()
        .then(|| root.canonicalize().ok())
        .flatten()
}

/// Runs `reconciled new`.
pub(crate) fn new(args: NewArgs) -> anyhow::Result<()> {
    let sdk = match args.sdk.clone().or_else(default_sdk) {
        Some(p) => p
            .canonicalize()
            .map_err(|e| anyhow::anyhow!("--sdk {}: {e}", p.display()))?,
        None => anyhow::bail!(
            "the reconciled checkout this binary was built from is gone: pass --sdk <path to a reconciled checkout>, whose guests/ holds the SDKs"
        ),
    };
    if sdk
        .to_string_lossy()
        .chars()
        .any(|c| matches!(c, '"' | '$' | '`' | '\\' | '\n'))
    {
        anyhow::bail!(
            "--sdk {}: the path goes into the project's shell scripts, Cargo.toml, tsconfig.json and go.mod, so it may not hold \", $, ` or \\; use a path without them",
            sdk.display()
        );
    }
    if !sdk.join("guests/sdk/Cargo.toml").is_file() {
        anyhow::bail!(
            "--sdk {}: no guests/sdk/Cargo.toml there; name the root of a reconciled checkout",
            sdk.display()
        );
    }
    let names = Names::new(&args.name, args.kind.as_deref(), &sdk)?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    if dir.exists()
        && std::fs::read_dir(&dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        anyhow::bail!(
            "{} already exists and is not empty; pick another --dir or remove it",
            dir.display()
        );
    }
    for (path, template, executable) in files(args.lang) {
        let to = dir.join(path);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(&to, names.fill(template))
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", to.display()))?;
        if executable {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| anyhow::anyhow!("cannot make {} executable: {e}", to.display()))?;
        }
    }
    // The lockfile the SDK is tested with: Rust takes the example's (cargo adjusts the rest);
    // Go needs the SDK module's go.sum, without which go build refuses its dependencies.
    let lock = match args.lang {
        Lang::Rust => Some(("examples/configmap-generator/Cargo.lock", "Cargo.lock")),
        Lang::Go => Some(("guests/go/go.sum", "go.sum")),
        Lang::Ts | Lang::Python => None,
    };
    if let Some((from, to)) = lock
        && let Ok(text) = std::fs::read_to_string(sdk.join(from))
    {
        std::fs::write(dir.join(to), text)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", dir.join(to).display()))?;
    }
    eprintln!(
        "wrote {} ({:?}, kind {}/{}/{}); next: cd {} && ./build.sh, then see README.md",
        dir.display(),
        args.lang,
        names.group,
        names.version,
        names.kind,
        dir.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_project_name_or_the_kind_given() {
        let n = Names::new("widget-ctl", None, Path::new("/sdk")).unwrap();
        assert_eq!(
            (
                n.group.as_str(),
                n.version.as_str(),
                n.kind.as_str(),
                n.plural.as_str(),
                n.krate.as_str()
            ),
            (
                "widget-ctl.example.com",
                "v1alpha1",
                "WidgetCtl",
                "widgetctls",
                "widget_ctl"
            )
        );
        let n = Names::new("p", Some("apps.example.com/v1/Policy"), Path::new("/sdk")).unwrap();
        assert_eq!(
            (n.singular.as_str(), n.plural.as_str()),
            ("policy", "policies")
        );
        assert_eq!(
            Names::new("b", Some("a.io/v1/Box"), Path::new("/"))
                .unwrap()
                .plural,
            "boxes"
        );
    }

    #[test]
    fn refuses_names_kubernetes_or_cargo_would_refuse_later() {
        for bad in ["Widget", "-x", "x_y", "", "1x"] {
            assert!(Names::new(bad, None, Path::new("/")).is_err(), "{bad}");
        }
        for bad in [
            "v1/Widget",
            "example/v1/Widget",
            "a.io/V1/Widget",
            "a.io/v1/widget",
        ] {
            let e = Names::new("x", Some(bad), Path::new("/"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("--kind"), "{bad}: {e}");
        }
    }

    #[test]
    fn every_placeholder_of_every_template_is_filled() {
        let n = Names::new("x", None, Path::new("/sdk")).unwrap();
        for lang in [Lang::Rust, Lang::Ts, Lang::Python, Lang::Go] {
            for (path, template, _) in files(lang) {
                assert!(!n.fill(template).contains("{{"), "{lang:?} {path}");
            }
        }
    }

    /// The first save in a new Rust project took 22 s under `dev --build`: `./build.sh` had
    /// built the release profile, so the first rebuild compiled every dependency again.
    #[test]
    fn a_new_rust_projects_build_sh_builds_the_profile_dev_build_rebuilds_in() {
        let n = Names::new("x", None, Path::new("/sdk")).unwrap();
        let (_, template, _) = files(Lang::Rust)
            .into_iter()
            .find(|(path, _, _)| *path == "build.sh")
            .unwrap();
        let script = n.fill(template);
        let dev_build = reconciled::sources::dev_build::dev_profile();
        let line = format!(
            "args=({})",
            dev_build
                .iter()
                .map(|a| format!("'{a}'"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        assert!(script.contains(&line), "{script}");
        let profile = format!("profile={}\n", reconciled::sources::dev_build::DEV_PROFILE);
        assert!(script.contains(&profile), "{script}");
    }

    #[test]
    fn a_go_project_takes_the_sdk_module_from_the_checkout_with_its_go_sum() {
        let sdk = std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap();
        let dir = std::env::temp_dir().join(format!("reconciled-new-go-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        new(NewArgs {
            name: "hello-go".into(),
            lang: Lang::Go,
            kind: Some("apps.example.com/v1/Greeting".into()),
            dir: Some(dir.clone()),
            sdk: Some(sdk.clone()),
        })
        .unwrap();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        let go_mod = read("go.mod");
        assert!(go_mod.starts_with("module hello-go\n"), "{go_mod}");
        assert!(
            go_mod.contains(&format!(
                "replace reconciled.dev/guest => {}/guests/go",
                sdk.display()
            )),
            "{go_mod}"
        );
        let sdk_mod = std::fs::read_to_string(sdk.join("guests/go/go.mod")).unwrap();
        let pkg = sdk_mod
            .lines()
            .find(|l| l.contains("go.bytecodealliance.org/pkg"))
            .unwrap();
        let pkg = pkg.trim().trim_start_matches("require ");
        assert!(
            go_mod.contains(&format!("require {pkg} // indirect")),
            "the template requires the SDK's version of {pkg}:\n{go_mod}"
        );
        assert_eq!(
            read("go.sum"),
            std::fs::read_to_string(sdk.join("guests/go/go.sum")).unwrap()
        );
        assert!(
            read("main.go")
                .contains(r#"reconciled.NewKind[Greeting]("apps.example.com", "v1", "Greeting")"#)
        );
        assert!(read("status.go").contains("type GreetingStatus struct"));
        assert!(read("build.sh").contains(&format!("\"{}/guests/go/build.sh\"", sdk.display())));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
