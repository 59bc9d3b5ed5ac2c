//! `reconciled run --record <dir> --record-guest <name>`: which guest's reconciles are recorded,
//! where, and for how long.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

/// The recording options of `reconciled run`.
#[derive(Args)]
pub(crate) struct RecordArgs {
    /// Record one guest's reconciles into this folder, one YAML file each (request, reads with
    /// their answers, writes, Events, outcome; Secrets' values redacted), for `reconciled replay`.
    #[arg(long, requires = "record_guest")]
    pub(crate) record: Option<PathBuf>,
    /// The guest to record, by name (as `reconciled status` shows it).
    #[arg(long = "record-guest", requires = "record")]
    pub(crate) record_guest: Option<String>,
    /// Stop recording after this many MiB of recordings.
    #[arg(long = "record-max-mib", default_value_t = 256)]
    record_max_mib: u64,
    /// Stop recording after this many seconds.
    #[arg(long = "record-for-s", default_value_t = 3600)]
    record_for_s: u64,
}

impl RecordArgs {
    /// The guest to record and its recorder, if asked for.
    pub(crate) fn recorder(
        &self,
    ) -> anyhow::Result<Option<(String, reconciled::guest::tape::RecorderRef)>> {
        let (Some(dir), Some(guest)) = (&self.record, &self.record_guest) else {
            return Ok(None);
        };
        let recorder = reconciled::guest::tape::Recorder::to_dir(
            dir.clone(),
            self.record_max_mib.saturating_mul(1 << 20),
            std::time::Duration::from_secs(self.record_for_s),
        )
        .map_err(|e| anyhow::anyhow!("--record {}: {e}", dir.display()))?;
        tracing::info!(guest = %guest, dir = %dir.display(), "recording the guest's reconciles");
        Ok(Some((
            guest.clone(),
            reconciled::guest::tape::RecorderRef(Arc::new(recorder)),
        )))
    }
}
