//! The standard process metrics (`process_*`, as the Go and Python clients name them), read
//! from `/proc`, so that memory and CPU per guest can be charted against the guests loaded.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::encode::{NO_LABELS, counter, family, gauge};

/// Why the process metrics could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file under `/proc` could not be read: not Linux, or `/proc` is not mounted.
    #[error("cannot read {path} (the process_* metrics are left out): {source}")]
    Read {
        /// The file.
        path: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file under `/proc` did not have the layout of Linux's.
    #[error(
        "{path} does not have the layout of Linux's (the process_* metrics are left out): {what}"
    )]
    Layout {
        /// The file.
        path: &'static str,
        /// What was missing or unreadable.
        what: &'static str,
    },
    /// `sysconf` did not answer for the clock tick or the page size.
    #[error("sysconf({0}) failed (the process_* metrics are left out)")]
    Sysconf(&'static str),
}

/// The module's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The host process's resources, read from `/proc` as Prometheus' standard process collector
/// reads them.
///
/// Where it may surprise: `open_fds` counts the descriptor used to list the others, as the Go
/// collector's does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Process {
    /// User and system CPU time.
    pub cpu_seconds: f64,
    /// Resident set size.
    pub resident_memory_bytes: u64,
    /// Virtual memory size.
    pub virtual_memory_bytes: u64,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on open file descriptors; `None` when unlimited.
    pub max_fds: Option<u64>,
}

impl Process {
    /// Reads the current process from `/proc/self`, `/proc/stat` and `sysconf`.
    pub fn read() -> Result<Self> {
        let read = |path: &'static str| {
            std::fs::read_to_string(path).map_err(|source| Error::Read { path, source })
        };
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .map_err(|source| Error::Read {
                path: "/proc/self/fd",
                source,
            })?
            .count() as u64;
        // SAFETY: sysconf reads a configuration value; it has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        // SAFETY: as above.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if ticks <= 0 {
            return Err(Error::Sysconf("_SC_CLK_TCK"));
        }
        if page <= 0 {
            return Err(Error::Sysconf("_SC_PAGESIZE"));
        }
        Self::parse(
            &read("/proc/self/stat")?,
            &read("/proc/stat")?,
            &read("/proc/self/limits")?,
            open_fds,
            ticks as f64,
            page as u64,
        )
    }

    /// The process from the text of `/proc/self/stat`, `/proc/stat` and `/proc/self/limits`.
    pub(crate) fn parse(
        stat: &str,
        system: &str,
        limits: &str,
        open_fds: u64,
        ticks_per_second: f64,
        page_size: u64,
    ) -> Result<Self> {
        let layout = |path, what| Error::Layout { path, what };
        // The command name, in parentheses, may itself hold spaces and parentheses: the fields
        // are what follows the last `)`, starting with the third (the state).
        let (_, rest) = stat
            .rsplit_once(')')
            .ok_or(layout("/proc/self/stat", "no `)` after the command"))?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize, what| {
            fields
                .get(n - 3)
                .and_then(|f| f.parse::<u64>().ok())
                .ok_or(layout("/proc/self/stat", what))
        };
        let utime = field(14, "utime")?;
        let stime = field(15, "stime")?;
        let start_ticks = field(22, "starttime")?;
        let vsize = field(23, "vsize")?;
        let rss_pages = field(24, "rss")?;
        let boot = system
            .lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or(layout("/proc/stat", "btime"))?;
        let soft = limits
            .lines()
            .find_map(|l| l.strip_prefix("Max open files"))
            .and_then(|l| l.split_whitespace().next())
            .ok_or(layout("/proc/self/limits", "Max open files"))?;
        let max_fds = match soft {
            "unlimited" => None,
            n => Some(
                n.parse()
                    .map_err(|_| layout("/proc/self/limits", "Max open files"))?,
            ),
        };
        Ok(Process {
            cpu_seconds: (utime + stime) as f64 / ticks_per_second,
            resident_memory_bytes: rss_pages.saturating_mul(page_size),
            virtual_memory_bytes: vsize,
            start_time_seconds: boot as f64 + start_ticks as f64 / ticks_per_second,
            open_fds,
            max_fds,
        })
    }
}

/// The standard process families, with the names and units of Prometheus' Go collector.
pub(super) fn encode_process(e: &mut DescriptorEncoder, p: &Process) -> std::fmt::Result {
    family(
        e,
        (
            "process_cpu_seconds",
            "Total user and system CPU time spent.",
        ),
        MetricType::Counter,
        true,
        |m| counter(m, &NO_LABELS, p.cpu_seconds),
    )?;
    family(
        e,
        (
            "process_resident_memory_bytes",
            "Resident memory size: the host, its informer caches and every guest's instances.",
        ),
        MetricType::Gauge,
        true,
        |m| gauge(m, &NO_LABELS, p.resident_memory_bytes),
    )?;
    family(
        e,
        (
            "process_virtual_memory_bytes",
            "Virtual memory size, which includes address space reserved for guests' memories.",
        ),
        MetricType::Gauge,
        true,
        |m| gauge(m, &NO_LABELS, p.virtual_memory_bytes),
    )?;
    family(
        e,
        (
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch.",
        ),
        MetricType::Gauge,
        true,
        |m| gauge(m, &NO_LABELS, p.start_time_seconds),
    )?;
    family(
        e,
        ("process_open_fds", "Open file descriptors."),
        MetricType::Gauge,
        true,
        |m| gauge(m, &NO_LABELS, p.open_fds),
    )?;
    family(
        e,
        (
            "process_max_fds",
            "The limit on open file descriptors; absent when unlimited.",
        ),
        MetricType::Gauge,
        p.max_fds.is_some(),
        |m| match p.max_fds {
            Some(n) => gauge(m, &NO_LABELS, n),
            None => Ok(()),
        },
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const STAT: &str = "4242 (re con) ciled)) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
        250 50 0 0 20 0 12 0 123400 987654321 2048 18446744073709551615 1 1 0 0 0 0 0 4096 \
        17408 0 0 0 17 1 0 0 0 0 0";
    pub(crate) const SYSTEM: &str = "cpu  1 2 3 4\nbtime 1700000000\nprocesses 9\n";
    pub(crate) const LIMITS: &str = "Limit                     Soft Limit           Hard Limit           Units\n\
        Max cpu time              unlimited            unlimited            seconds\n\
        Max open files            1024                 1048576              files\n";

    #[test]
    fn process_is_read_from_the_proc_layout_whatever_the_command_name() {
        let p = Process::parse(STAT, SYSTEM, LIMITS, 12, 100.0, 4096).unwrap();
        assert_eq!(
            p,
            Process {
                cpu_seconds: 3.0,
                resident_memory_bytes: 2048 * 4096,
                virtual_memory_bytes: 987_654_321,
                start_time_seconds: 1_700_000_000.0 + 1234.0,
                open_fds: 12,
                max_fds: Some(1024),
            }
        );
    }

    #[test]
    fn an_unlimited_descriptor_limit_is_none_and_a_missing_field_is_an_error() {
        let unlimited = LIMITS.replace("1024 ", "unlimited ");
        let p = Process::parse(STAT, SYSTEM, &unlimited, 1, 100.0, 4096).unwrap();
        assert_eq!(p.max_fds, None);
        let err = Process::parse(STAT, "cpu 1 2\n", LIMITS, 1, 100.0, 4096).unwrap_err();
        assert_eq!(
            err.to_string(),
            "/proc/stat does not have the layout of Linux's (the process_* metrics are left out): btime"
        );
        let short = "1 (x) S 1 2 3";
        assert!(matches!(
            Process::parse(short, SYSTEM, LIMITS, 1, 100.0, 4096),
            Err(Error::Layout { what: "utime", .. })
        ));
    }

    #[test]
    fn this_process_can_be_read_on_linux() {
        if cfg!(target_os = "linux") {
            let p = Process::read().unwrap();
            assert!(p.resident_memory_bytes > 0 && p.open_fds > 0, "{p:?}");
        }
    }
}
