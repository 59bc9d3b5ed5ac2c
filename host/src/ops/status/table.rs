//! The status document as `reconciled status` prints it: an aligned table of the guests, and
//! lines under it for what has no row.

use super::*;

const COLUMNS: [&str; 7] = [
    "NAME",
    "STATE",
    "DIGEST",
    "SOURCE",
    "LOADED",
    "RECONCILES",
    "LAST ERROR",
];

/// How much of the last error a table row shows; `/status` has all of it.
const LAST_ERROR_CHARS: usize = 80;

impl Status {
    /// The document as `reconciled status` prints it: one row per guest, then the sources that
    /// deliver no guest and the guests' informers that are not synced, if any.
    ///
    /// Absent values show as `-`. The last column says why a guest is not serving (its
    /// `reason`, after its blame) and otherwise its last rejection (`last_error`), cut to 80
    /// characters. The digest shows its first 12 hex characters. Control characters (line
    /// breaks, but also terminal escapes from a guest's error message) show as spaces. Widths
    /// count characters, which lines up for all but double-width scripts.
    pub fn table(&self) -> String {
        if self.guests.is_empty() && self.sources_without_guests.is_empty() {
            return "no guests are loaded\n".into();
        }
        let sharded = self.replicas.is_some();
        let rows: Vec<Vec<String>> = self.guests.iter().map(|g| row(g, sharded)).collect();
        let mut columns: Vec<&str> = COLUMNS.to_vec();
        if sharded {
            columns.insert(2, "SHARD");
        }
        let mut widths: Vec<usize> = columns.iter().map(|c| c.chars().count()).collect();
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let header: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
        for cells in std::iter::once(header).chain(rows) {
            for (i, (cell, width)) in cells.iter().zip(widths.iter().copied()).enumerate() {
                if i + 1 == cells.len() {
                    // No padding after the last column: trailing spaces only get in the way.
                    out.push_str(cell);
                } else {
                    out.push_str(&format!("{cell:<width$}  "));
                }
            }
            out.push('\n');
        }
        if let Some(r) = &self.replicas {
            let held: Vec<String> = r.held.iter().map(u32::to_string).collect();
            out.push_str(&format!(
                "\nreplica {} (Leases in {}): holds shards [{}] of {}; replicas alive: {}\n",
                cell(Some(&r.identity)),
                cell(Some(&r.namespace)),
                held.join(","),
                r.shards.len(),
                r.members
                    .iter()
                    .map(|m| cell(Some(m)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if !self.sources_without_guests.is_empty() {
            out.push_str("\nsources that deliver no guest:\n");
            for s in &self.sources_without_guests {
                let (source, problem) = (cell(Some(&s.source)), cell(Some(&s.problem)));
                out.push_str(&format!("  {source}: {problem}\n"));
            }
        }
        let throttled: Vec<String> = self
            .tenants
            .iter()
            .filter_map(|t| {
                let th = t.throttled.as_ref()?;
                Some(format!(
                    "  {}: since {}, used {:.0} ms of {:.0} ms in the last minute",
                    cell(Some(&t.tenant)),
                    th.since,
                    th.used_ms_last_minute,
                    th.budget_ms_per_minute
                ))
            })
            .collect();
        if !throttled.is_empty() {
            out.push_str("\ntenants throttled for their CPU budget:\n");
            out.push_str(&throttled.join("\n"));
            out.push('\n');
        }
        let rollouts: Vec<String> = (self.guests.iter())
            .filter_map(|g| Some((g, g.rollout.as_ref()?)))
            .map(|(g, p)| {
                let hex: String = p.digest.chars().take(12).collect();
                let why = match (&p.reason, &p.message) {
                    (Some(r), Some(m)) => format!(" ({r}: {})", truncate(m, LAST_ERROR_CHARS)),
                    _ => String::new(),
                };
                format!(
                    "  {}: {hex} {}, step {} of {}{why}",
                    cell(Some(&g.name)),
                    p.summary(),
                    (p.step + 1).min(p.steps),
                    p.steps
                )
            })
            .collect();
        if !rollouts.is_empty() {
            out.push_str("\nrollouts:\n");
            out.push_str(&rollouts.join("\n"));
            out.push('\n');
        }
        let unsynced: Vec<String> = self.guests.iter().flat_map(unsynced_informers).collect();
        if !unsynced.is_empty() {
            out.push_str("\ninformers not synced:\n");
            for line in unsynced {
                out.push_str(&line);
                out.push('\n');
            }
        }
        out
    }
}

fn row(guest: &GuestStatus, sharded: bool) -> Vec<String> {
    let digest = guest.digest.as_deref().map(|d| {
        let hex = d.strip_prefix("sha256:").unwrap_or(d);
        hex.chars().take(12).collect::<String>()
    });
    let r = &guest.reconciles;
    // Why it is not serving now, if it is not; else the last rejection.
    let last_error = match (&guest.reason, guest.blame) {
        (None, _) => cell(guest.last_error.as_deref()),
        (Some(reason), None) => cell(Some(reason)),
        (Some(reason), Some(blame)) => format!("[blame: {blame}] {}", cell(Some(reason))),
    };
    let last_error = truncate(&last_error, LAST_ERROR_CHARS);
    let mut row = vec![
        cell(Some(&guest.name)),
        guest.state.to_string(),
        cell(digest.as_deref()),
        cell(Some(&guest.source)),
        cell(guest.loaded_at.as_deref()),
        format!("{}/{}/{}", r.ok, r.failed, r.traps),
        last_error,
    ];
    if sharded {
        let shard = match (guest.shard, &guest.owner, &guest.key_shards) {
            (_, _, Some(keys)) => format!("keys {}", cell(Some(keys))),
            (Some(s), Some(o), None) => format!("{s} on {}", cell(Some(o))),
            (Some(s), None, None) => format!("{s} on -"),
            (None, _, None) => "-".into(),
        };
        row.insert(2, shard);
    }
    row
}

fn unsynced_informers(guest: &GuestStatus) -> impl Iterator<Item = String> + '_ {
    let name = cell(Some(&guest.name));
    guest
        .informers
        .iter()
        .filter(|i| i.state != InformerState::Synced)
        .map(move |i| {
            let mut line = format!("  {name}: {} is {}", cell(Some(&i.kind)), i.state);
            if let Some(message) = &i.message {
                line.push_str(": ");
                line.push_str(&cell(Some(message)));
            }
            line
        })
}

/// `text` as a cell, cut to `max` characters with an ellipsis.
fn truncate(text: &str, max: usize) -> String {
    let text = cell(Some(text));
    if text.chars().count() <= max {
        return text;
    }
    let mut cut: String = text.chars().take(max - 1).collect();
    cut.push('…');
    cut
}

/// A value as a table cell: absent or empty as `-`, control characters as spaces.
fn cell(text: Option<&str>) -> String {
    match text {
        None | Some("") => "-".into(),
        Some(text) => crate::text::one_line(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::status::tests::{guest, informer};

    #[test]
    fn a_rollout_shows_under_the_table_with_its_step_and_why_it_ended() {
        use crate::rollout::progress::{Phase, Progress};
        let mut g = guest("team-a/stamp", GuestState::Serving);
        g.rollout = Some(Progress {
            digest: "ab".repeat(32),
            settings_hash: "s".into(),
            step: 0,
            steps: 3,
            phase: Phase::RolledBack,
            percent: 0,
            min_reconciles: 20,
            compared: 0,
            divergent: 0,
            reconciles: 21,
            errors: 7,
            live_reconciles: 21,
            waiting: None,
            first_difference: None,
            reason: Some("Errors".into()),
            message: Some("at 10% of keys, 7 of 21 reconciles failed\nby its own fault".into()),
            since: "2026-12-03T18:00:00Z".into(),
        });
        let status = Status {
            guests: vec![g],
            ..Status::default()
        };
        let table = status.table();
        assert!(
            table.contains(
                "rollouts:\n  team-a/stamp: abababababab rolled back, step 1 of 3 (Errors: at 10% of keys, 7 of 21 reconciles failed by its own fault)\n"
            ),
            "{table}"
        );
    }

    #[test]
    fn renders_guests_as_an_aligned_table() {
        let status = Status {
            guests: vec![
                GuestStatus {
                    digest: Some(
                        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".into(),
                    ),
                    source: "configmap team-a/my-rec key rec.wasm".into(),
                    loaded_at: Some("2026-11-29T15:00:00Z".into()),
                    loads: 3,
                    rejections: 1,
                    reconciles: Reconciles {
                        ok: 10,
                        failed: 1,
                        ..Reconciles::default()
                    },
                    informers: vec![informer("v1/ConfigMap", InformerState::Synced, None)],
                    ..guest("team-a/my-rec/rec", GuestState::Serving)
                },
                GuestStatus {
                    reason: Some(format!(
                        "component does not export reconcile\nline two {}",
                        "x".repeat(80)
                    )),
                    last_error: Some("component does not export reconcile".into()),
                    source: "file /x.wasm".into(),
                    reconciles: Reconciles {
                        failed: 2,
                        ..Reconciles::default()
                    },
                    informers: vec![
                        informer("v1/Secret", InformerState::Forbidden, Some("forbidden")),
                        informer("v1/Pod", InformerState::Syncing, None),
                    ],
                    ..guest("cmgen", GuestState::Rejected)
                },
            ],
            ..Status::default()
        };
        let expected = "\
NAME               STATE     DIGEST        SOURCE                                LOADED                RECONCILES  LAST ERROR
team-a/my-rec/rec  serving   0123456789ab  configmap team-a/my-rec key rec.wasm  2026-11-29T15:00:00Z  10/1/0      -
cmgen              rejected  -             file /x.wasm                          -                     0/2/0       component does not export reconcile line two xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…

informers not synced:
  cmgen: v1/Secret is Forbidden: forbidden
  cmgen: v1/Pod is Syncing
";
        let table = status.table();
        assert_eq!(table, expected);
        let last = table.lines().nth(2).unwrap();
        let error = &last[last.find("component").unwrap()..];
        assert_eq!(error.chars().count(), 80);
        assert!(error.ends_with('…'));
    }

    #[test]
    fn a_failing_guest_shows_its_blame_before_its_reason() {
        let status = Status {
            guests: vec![GuestStatus {
                reason: Some("worker panicked on ns/work".into()),
                blame: Some(Blame::Host),
                last_error: Some("an older rejection".into()),
                ..guest("rec", GuestState::Failing)
            }],
            ..Status::default()
        };
        let table = status.table();
        let row = table.lines().nth(1).unwrap();
        assert!(
            row.starts_with("rec   failing")
                && row.ends_with("[blame: host] worker panicked on ns/work"),
            "{table}"
        );
    }

    #[test]
    fn renders_absent_and_empty_values_as_dashes() {
        let status = Status {
            guests: vec![GuestStatus {
                source: String::new(),
                digest: Some(String::new()),
                ..guest("a", GuestState::Loading)
            }],
            ..Status::default()
        };
        assert_eq!(
            status.table(),
            "\
NAME  STATE    DIGEST  SOURCE  LOADED  RECONCILES  LAST ERROR
a     loading  -       -       -       0/0/0       -
"
        );
    }

    #[test]
    fn a_terminal_escape_in_a_guest_error_is_shown_as_spaces() {
        let status = Status {
            guests: vec![GuestStatus {
                reason: Some("bad\x1b[2Jthing\r\nhere".into()),
                ..guest("a", GuestState::Rejected)
            }],
            ..Status::default()
        };
        let table = status.table();
        assert!(
            !table.contains('\x1b') && !table.contains('\r'),
            "{table:?}"
        );
        assert!(table.ends_with("bad [2Jthing  here\n"), "{table:?}");
    }

    #[test]
    fn sources_without_guests_are_listed_under_the_table() {
        let status = Status {
            sources_without_guests: vec![SourceProblem {
                source: "configmap team-b/x".into(),
                problem: "no key ends in .wasm or .wasm.gz".into(),
            }],
            ..Status::default()
        };
        assert_eq!(
            status.table(),
            "\
NAME  STATE  DIGEST  SOURCE  LOADED  RECONCILES  LAST ERROR

sources that deliver no guest:
  configmap team-b/x: no key ends in .wasm or .wasm.gz
"
        );
    }

    #[test]
    fn throttled_tenants_are_listed_under_the_table() {
        let tenant = |name: &str, throttled: Option<Throttled>| TenantStatus {
            tenant: name.into(),
            weight: 1,
            cpu_seconds: 3.0,
            compile_seconds: 0.5,
            used_ms_last_minute: 7200.0,
            cpu_budget_ms_per_minute: Some(6000.0),
            throttled,
            throttled_seconds: 4.0,
            throttles: 1,
            guests: Vec::new(),
        };
        let status = Status {
            guests: vec![guest("team-a/x/rec", GuestState::Serving)],
            tenants: vec![
                tenant(
                    "team-a",
                    Some(Throttled {
                        since: "2026-12-01T19:00:00Z".into(),
                        budget_ms_per_minute: 6000.0,
                        used_ms_last_minute: 7200.0,
                    }),
                ),
                tenant("team-b", None),
            ],
            ..Status::default()
        };
        let table = status.table();
        assert!(
            table.ends_with(
                "\ntenants throttled for their CPU budget:\n  team-a: since 2026-12-01T19:00:00Z, used 7200 ms of 6000 ms in the last minute\n"
            ),
            "{table}"
        );
        assert!(!table.contains("team-b"), "only throttled tenants: {table}");
    }

    #[test]
    fn renders_no_guests_as_a_sentence() {
        assert_eq!(Status::default().table(), "no guests are loaded\n");
        let empty: Status = serde_json::from_str("{}").unwrap();
        assert_eq!(empty.table(), "no guests are loaded\n");
    }

    #[test]
    fn among_replicas_the_table_shows_each_guests_shard_and_owner_and_this_replicas_view() {
        let standby = GuestStatus {
            shard: Some(3),
            owner: Some("replica-b".into()),
            key_shards: None,
            reason: Some("shard 3 is not held by this replica".into()),
            ..guest("stamp", GuestState::Standby)
        };
        let status = Status {
            guests: vec![standby],
            replicas: Some(ReplicasStatus {
                identity: "replica-a".into(),
                namespace: "reconciled-system".into(),
                members: vec!["replica-a".into(), "replica-b".into()],
                held: vec![0, 2],
                shards: (0..4)
                    .map(|shard| ShardStatus {
                        shard,
                        ..ShardStatus::default()
                    })
                    .collect(),
            }),
            ..Status::default()
        };
        let table = status.table();
        let mut lines = table.lines();
        let header = lines.next().unwrap();
        assert!(header.starts_with("NAME   STATE    SHARD"), "{table}");
        assert!(
            lines.next().unwrap().contains("standby  3 on replica-b"),
            "{table}"
        );
        assert!(
            table.contains("replica replica-a (Leases in reconciled-system): holds shards [0,2] of 4; replicas alive: replica-a, replica-b"),
            "{table}"
        );
        let alone = Status {
            replicas: None,
            ..status
        };
        assert!(
            !alone.table().contains("SHARD"),
            "a host alone has no shard column"
        );
    }
}
