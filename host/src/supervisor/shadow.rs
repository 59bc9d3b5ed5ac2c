//! Shadow versions from the host config: the module compiled once, then carried in the
//! guest's settings (see [`crate::controller::shadow`]).

use std::path::Path;

use crate::controller::Settings;
use crate::controller::shadow::{Problem, ShadowModule};
use crate::supervisor::Supervisor;

impl Supervisor {
    /// `settings` with the module at `path`, if any, as their shadow version. One that cannot
    /// be read or compiled is kept as its reason, which `/status` shows; the live version runs
    /// without it.
    pub async fn with_shadow(&self, settings: Settings, path: Option<&Path>) -> Settings {
        let Some(path) = path else {
            return settings;
        };
        let module = self.shadow_module(path).await;
        if let Err(e) = &module {
            tracing::error!(guest = %settings.name, "{e}; the guest runs without its shadow");
        }
        Settings {
            shadow: Some(ShadowModule(module)),
            ..settings
        }
    }

    async fn shadow_module(&self, path: &Path) -> Result<crate::guest::Module, Problem> {
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| Problem::Unreadable {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        let module = (self.runtime.compile(bytes).await).map_err(|e| Problem::Invalid {
            path: shown,
            reason: e.to_string(),
        })?;
        module.persist_artifact();
        Ok(module)
    }
}
