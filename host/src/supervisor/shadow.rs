//! Shadow versions from the host config: the module compiled once, then carried in the
//! guest's settings (see [`crate::controller::shadow`]).

use std::path::Path;

use crate::controller::Settings;
use crate::controller::shadow::ShadowModule;
use crate::supervisor::Supervisor;

impl Supervisor {
    /// `settings` with the module at `path`, if any, as their shadow version. A shadow that
    /// cannot be read or compiled is logged and left out: the live version runs without one.
    pub async fn with_shadow(&self, settings: Settings, path: Option<&Path>) -> Settings {
        let Some(path) = path else {
            return settings;
        };
        match self.shadow_module(path).await {
            Ok(module) => Settings {
                shadow: Some(ShadowModule(module)),
                ..settings
            },
            Err(e) => {
                tracing::error!(guest = %settings.name, "{e}; the guest runs without its shadow");
                settings
            }
        }
    }

    async fn shadow_module(&self, path: &Path) -> Result<crate::guest::Module, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot read the shadow module {}: {e}", path.display()))?;
        let module = self
            .runtime
            .compile(bytes)
            .await
            .map_err(|e| format!("the shadow module {}: {e}", path.display()))?;
        module.persist_artifact();
        Ok(module)
    }
}
