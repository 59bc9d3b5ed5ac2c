//! Starting and stopping control planes leaves nothing behind: no process, no directory.

use std::path::Path;

use testenv::ControlPlane;

/// Pids of every process whose command line mentions `needle`. Each control plane passes its
/// own run directory to etcd, kube-apiserver and kube-controller-manager, so this finds exactly
/// that plane's processes.
fn processes_mentioning(needle: &Path) -> Vec<(u32, String)> {
    let needle = needle.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        if cmdline.contains(&needle) {
            found.push((pid, cmdline));
        }
    }
    found
}

#[test]
fn ten_starts_and_stops_leave_no_process_behind() {
    let mut timings = Vec::new();
    for round in 0..10 {
        let started = std::time::Instant::now();
        let cp = ControlPlane::start().unwrap_or_else(|e| panic!("round {round}: {e}"));
        timings.push(started.elapsed());
        let dir = cp.dir().to_path_buf();
        let pids = cp.pids();
        assert_eq!(
            pids.len(),
            3,
            "etcd, kube-apiserver and kube-controller-manager should all be running"
        );
        assert_eq!(
            processes_mentioning(&dir).len(),
            3,
            "round {round}: {:?}",
            processes_mentioning(&dir)
        );
        drop(cp);
        let left = processes_mentioning(&dir);
        assert!(
            left.is_empty(),
            "round {round}: processes left after drop: {left:?}"
        );
        for pid in pids {
            assert!(
                !Path::new(&format!("/proc/{pid}")).exists(),
                "round {round}: pid {pid} still exists (zombie?)"
            );
        }
        assert!(
            !dir.exists(),
            "round {round}: {} was not removed",
            dir.display()
        );
    }
    timings.sort();
    eprintln!(
        "start-to-ready over 10 rounds: min {:?}, median {:?}, max {:?}",
        timings[0], timings[5], timings[9]
    );
}
