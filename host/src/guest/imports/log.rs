//! `log` import: guest log lines, tagged with the guest's name, through the host's `tracing`.

use crate::guest::bindings::reconciled::runtime::log::{Host, Level};
use crate::guest::imports::HostState;

/// Longest guest log line kept; the rest is cut so one guest cannot flood the host's logs.
const MAX_LINE: usize = 4096;

impl Host for HostState {
    async fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        self.count_call()?;
        let guest = self
            .ctx
            .as_ref()
            .map_or("(describing)", |c| c.name.as_str());
        // One line per call: a guest must not forge the host's log lines.
        let message = crate::text::one_line(&message.chars().take(MAX_LINE).collect::<String>());
        match level {
            Level::Debug => tracing::debug!(target: "guest", %guest, "{message}"),
            Level::Info => tracing::info!(target: "guest", %guest, "{message}"),
            Level::Warn => tracing::warn!(target: "guest", %guest, "{message}"),
            Level::Error => tracing::error!(target: "guest", %guest, "{message}"),
        }
        Ok(())
    }
}
