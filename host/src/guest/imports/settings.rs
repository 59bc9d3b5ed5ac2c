//! The `settings` interface: what whoever deployed this version of the module configured.

use crate::guest::bindings::reconciled::runtime::settings::Host;
use crate::guest::imports::HostState;

impl Host for HostState {
    /// The version's settings (see [`GuestSettings`](crate::guest::settings::GuestSettings)).
    /// Not recorded: a recording keeps the settings of its call once, with the recording.
    async fn get(&mut self) -> wasmtime::Result<String> {
        let ctx = self.enter()?;
        let settings = ctx.settings.as_str();
        self.note_bytes(settings.len());
        Ok(settings.to_string())
    }
}
