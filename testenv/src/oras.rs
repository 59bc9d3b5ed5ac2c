//! The oras CLI (oras.land/oras), built from `testenv/oras` with the machine's Go like the
//! control plane and cached: what a user pulls an OCI artifact with, so the tests prove that a
//! module `reconciled push` wrote pulls like any other.

use std::path::PathBuf;

const ORAS: crate::go_tool::Tool = crate::go_tool::Tool {
    name: "oras",
    module: "oras",
    sources: &[
        ("go.mod", include_str!("../oras/go.mod")),
        ("go.sum", include_str!("../oras/go.sum")),
        ("tools.go", include_str!("../oras/tools.go")),
    ],
    package: "oras.land/oras/cmd/oras",
};

/// The oras binary, built first if the cache lacks one for these sources; the error is the
/// last line Go printed, or why the cache could not be used.
pub fn binary() -> Result<PathBuf, String> {
    crate::go_tool::binary(&ORAS)
}
