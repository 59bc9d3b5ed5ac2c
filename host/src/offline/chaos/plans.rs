//! The perturbations `--chaos` tries, generated from the reference run and pruned to those that
//! can change its outcome: a pure function of the reference's trace.
//!
//! Each plan is one perturbation at one step. Before that step a perturbed run is the
//! reference itself (runs are deterministic), so a step number means the same reconcile in both,
//! and a failing plan is its own minimal reproduction.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::offline::chaos::trace::Step;
use crate::offline::server::{Change, Write};

/// One perturbation of a run. Steps count the run's reconciles from 1.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "perturbation", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Perturbation {
    /// The host dies right after the step's `write`-th write: the server holds writes
    /// 1..=`write`, the guest's outcome is lost, and the next reconcile starts from there.
    CrashAfterWrite {
        /// The reconcile.
        at: u32,
        /// The last write that lands.
        write: u32,
    },
    /// The step reads `object` as it was when step `seen_at` began (absent, if it was), though
    /// the guest has since seen it newer: a restarted host (read-your-writes forgets what it
    /// wrote before) whose watch a lagging API server serves. Its writes reach the server.
    Stale {
        /// The reconcile.
        at: u32,
        /// The object, named as the server names it (`apiVersion/Kind namespace/name`).
        object: String,
        /// The earlier step whose view of it is served.
        seen_at: u32,
    },
    /// Changes `change` and the next one reach the guest as one: the state between them is
    /// never seen (a delete and a recreate with the same name, seen as one update).
    SkipState {
        /// The first of the two changes, counted from 1.
        change: u32,
    },
    /// The step's `write`-th write gets `answer` (`conflict`, `forbidden`, `timeout`) instead
    /// of the server's.
    Inject {
        /// The reconcile.
        at: u32,
        /// The write.
        write: u32,
        /// What the server answers.
        answer: String,
    },
    /// The step's requeue-after fires at once: the next reconcile sees the same clock.
    EarlyRequeue {
        /// The reconcile that asked to be requeued.
        at: u32,
    },
    /// The step's own writes do not reach its cache until it returns, so its reads do not show
    /// them. Only for a guest that opted out of read-your-writes: otherwise the host rules this
    /// out.
    UnseenWrites {
        /// The reconcile.
        at: u32,
    },
}

/// The answers [`Perturbation::Inject`] tries on each write.
pub const ANSWERS: [&str; 3] = ["conflict", "forbidden", "timeout"];

/// A `--plan` that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--plan {0:?} is not a plan; write one as a failing run prints it: crash@STEP:WRITE, stale@STEP:OBJECT<SEEN_AT, skip@CHANGE, inject@STEP:WRITE:ANSWER, early@STEP or unseen@STEP"
)]
pub struct Error(String);

impl Perturbation {
    /// The step it perturbs (a skipped change perturbs none).
    pub fn at(&self) -> Option<u32> {
        match self {
            Self::CrashAfterWrite { at, .. }
            | Self::Stale { at, .. }
            | Self::Inject { at, .. }
            | Self::EarlyRequeue { at }
            | Self::UnseenWrites { at } => Some(*at),
            Self::SkipState { .. } => None,
        }
    }

    /// Its family, for spreading a budget over all of them.
    pub fn family(&self) -> &'static str {
        match self {
            Self::CrashAfterWrite { .. } => "crash",
            Self::Stale { .. } => "stale",
            Self::SkipState { .. } => "skip",
            Self::Inject { .. } => "inject",
            Self::EarlyRequeue { .. } => "early",
            Self::UnseenWrites { .. } => "unseen",
        }
    }

    /// Reads what [`Display`](fmt::Display) writes.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let bad = || Error(text.to_string());
        let (family, rest) = text.split_once('@').ok_or_else(bad)?;
        let num = |s: &str| s.parse::<u32>().map_err(|_| bad());
        let plan = match family {
            "crash" => {
                let (at, write) = rest.split_once(':').ok_or_else(bad)?;
                Self::CrashAfterWrite {
                    at: num(at)?,
                    write: num(write)?,
                }
            }
            "stale" => {
                let (at, rest) = rest.split_once(':').ok_or_else(bad)?;
                let (object, seen_at) = rest.rsplit_once('<').ok_or_else(bad)?;
                Self::Stale {
                    at: num(at)?,
                    object: object.to_string(),
                    seen_at: num(seen_at)?,
                }
            }
            "skip" => Self::SkipState { change: num(rest)? },
            "inject" => {
                let mut parts = rest.splitn(3, ':');
                let (Some(at), Some(write), Some(answer)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    return Err(bad());
                };
                Self::Inject {
                    at: num(at)?,
                    write: num(write)?,
                    answer: answer.to_string(),
                }
            }
            "early" => Self::EarlyRequeue { at: num(rest)? },
            "unseen" => Self::UnseenWrites { at: num(rest)? },
            _ => return Err(bad()),
        };
        Ok(plan)
    }
}

impl fmt::Display for Perturbation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::CrashAfterWrite { at, write } => write!(f, "crash@{at}:{write}"),
            Self::Stale {
                at,
                object,
                seen_at,
            } => write!(f, "stale@{at}:{object}<{seen_at}"),
            Self::SkipState { change } => write!(f, "skip@{change}"),
            Self::Inject { at, write, answer } => write!(f, "inject@{at}:{write}:{answer}"),
            Self::EarlyRequeue { at } => write!(f, "early@{at}"),
            Self::UnseenWrites { at } => write!(f, "unseen@{at}"),
        }
    }
}

/// What plan generation needs to know beside the trace.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    /// Kinds the guest caches (`apiVersion/Kind`): only their objects can be served stale.
    pub cached: &'a [String],
    /// Whether the host makes the guest read its own writes.
    pub reads_its_writes: bool,
    /// The fixture's changes.
    pub changes: &'a [Change],
}

/// Every plan that can change the reference's outcome, in step order:
/// - a crash after each write but the step's last (after the last, the store holds what the
///   reference's does, and only the outcome is lost, which the next reconcile redoes);
/// - each [`ANSWERS`] answer on each write the reference saw succeed (a conflict only where the
///   server can answer one);
/// - for each cached object the step sees differently from an earlier step, the latest earlier
///   view of it, served stale;
/// - an early requeue after each requeue-after;
/// - unseen writes in each step that writes, when the guest opted out of read-your-writes;
/// - the state between two changes to the same object, skipped.
pub fn generate(steps: &[Step], cx: &Context<'_>) -> Vec<Perturbation> {
    let mut plans = Vec::new();
    let cached: BTreeSet<&str> = cx.cached.iter().map(String::as_str).collect();
    for (i, step) in steps.iter().enumerate() {
        let at = step_number(i);
        let writes = u32::try_from(step.writes.len()).unwrap_or(u32::MAX);
        for write in 1..writes {
            plans.push(Perturbation::CrashAfterWrite { at, write });
        }
        for (k, w) in step.writes.iter().enumerate() {
            if w.error.is_some() {
                continue;
            }
            for answer in ANSWERS {
                if answer == "conflict" && !can_conflict(w) {
                    continue;
                }
                plans.push(Perturbation::Inject {
                    at,
                    write: step_number(k),
                    answer: answer.to_string(),
                });
            }
        }
        if step.outcome.starts_with("requeue-after") {
            plans.push(Perturbation::EarlyRequeue { at });
        }
        if !cx.reads_its_writes && writes > 0 {
            plans.push(Perturbation::UnseenWrites { at });
        }
        let objects: BTreeSet<&String> = steps[..=i]
            .iter()
            .flat_map(|s| s.before.keys())
            .filter(|k| cached.contains(kind_of(k)))
            .collect();
        for object in objects {
            let now = step.before.get(object);
            let earlier = (0..i).rev().find(|&j| steps[j].before.get(object) != now);
            if let Some(j) = earlier {
                plans.push(Perturbation::Stale {
                    at,
                    object: object.clone(),
                    seen_at: step_number(j),
                });
            }
        }
    }
    for (j, pair) in cx.changes.windows(2).enumerate() {
        if changed_object(&pair[0]) == changed_object(&pair[1]) {
            plans.push(Perturbation::SkipState {
                change: step_number(j),
            });
        }
    }
    plans
}

/// At most `budget` of `plans`, chosen by `seed`: the families take turns, each in an order
/// shuffled by the seed, so that a small budget still tries every family.
pub fn select(plans: Vec<Perturbation>, budget: usize, seed: u64) -> Vec<Perturbation> {
    if plans.len() <= budget {
        return plans;
    }
    let mut families: BTreeMap<&'static str, Vec<Perturbation>> = BTreeMap::new();
    for p in plans {
        families.entry(p.family()).or_default().push(p);
    }
    let mut rng = seed ^ 0x9e37_79b9_7f4a_7c15;
    for list in families.values_mut() {
        // Fisher–Yates with splitmix64: the same seed picks the same plans on every machine.
        for i in (1..list.len()).rev() {
            let j = usize::try_from(splitmix(&mut rng) % (i as u64 + 1)).unwrap_or(0);
            list.swap(i, j);
        }
        list.reverse();
    }
    let mut chosen = Vec::with_capacity(budget);
    while chosen.len() < budget {
        let mut any = false;
        for list in families.values_mut() {
            if chosen.len() < budget
                && let Some(p) = list.pop()
            {
                chosen.push(p);
                any = true;
            }
        }
        if !any {
            break;
        }
    }
    chosen.sort();
    chosen
}

/// Whether the API server can answer `w` with a conflict: an update (its resourceVersion may
/// be old) or an apply that does not force. A create is refused as "already exists" only when
/// the object does, and a patch without a resourceVersion never conflicts.
fn can_conflict(w: &Write) -> bool {
    w.verb == "update" || (w.verb == "apply" && w.force != Some(true))
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn step_number(index: usize) -> u32 {
    u32::try_from(index + 1).unwrap_or(u32::MAX)
}

/// `apiVersion/Kind` of an object named as the server names it.
fn kind_of(object: &str) -> &str {
    object.split_once(' ').map_or(object, |(k, _)| k)
}

fn changed_object(change: &Change) -> String {
    match change {
        Change::Apply(v) => crate::offline::server::object_name(v),
        Change::Delete(o) => {
            let at = if o.namespace.is_empty() {
                o.name.clone()
            } else {
                format!("{}/{}", o.namespace, o.name)
            };
            format!("{}/{} {at}", o.api_version, o.kind)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offline::server::Interfered;
    use serde_json::{Value, json};

    fn write(verb: &str, error: Option<&str>) -> Write {
        Write {
            verb: verb.into(),
            kind: "v1/ConfigMap".into(),
            namespace: "default".into(),
            name: "a".into(),
            subresource: None,
            field_manager: None,
            force: None,
            body: None,
            error: error.map(str::to_string),
            step: 0,
        }
    }

    fn step(writes: Vec<Write>, outcome: &str, before: &[(&str, Value)]) -> Step {
        Step {
            writes,
            outcome: outcome.into(),
            message: None,
            interfered: Interfered::default(),
            before: before
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.clone()))
                .collect(),
        }
    }

    const CM: &str = "v1/ConfigMap default/a";

    #[test]
    fn every_plan_reads_back_from_what_it_prints() {
        for p in [
            Perturbation::CrashAfterWrite { at: 2, write: 1 },
            Perturbation::Stale {
                at: 3,
                object: "example.dev/v1/Thing default/x".into(),
                seen_at: 1,
            },
            Perturbation::Stale {
                at: 3,
                object: "v1/Namespace x".into(),
                seen_at: 2,
            },
            Perturbation::SkipState { change: 1 },
            Perturbation::Inject {
                at: 1,
                write: 2,
                answer: "conflict".into(),
            },
            Perturbation::EarlyRequeue { at: 4 },
            Perturbation::UnseenWrites { at: 1 },
        ] {
            assert_eq!(Perturbation::parse(&p.to_string()), Ok(p.clone()), "{p}");
        }
        assert!(Perturbation::parse("crash@x:1").is_err());
        assert!(Perturbation::parse("nothing").is_err());
    }

    #[test]
    fn crashes_stop_short_of_the_last_write_and_refused_writes_get_no_injection() {
        let steps = [step(
            vec![
                write("create", None),
                write("update", Some("conflict")),
                write("delete", None),
            ],
            "done",
            &[],
        )];
        let plans = generate(
            &steps,
            &Context {
                cached: &[],
                reads_its_writes: true,
                changes: &[],
            },
        );
        let crashes: Vec<_> = plans.iter().filter(|p| p.family() == "crash").collect();
        assert_eq!(crashes.len(), 2, "{plans:?}");
        let injected: BTreeSet<u32> = plans
            .iter()
            .filter_map(|p| match p {
                Perturbation::Inject { write, .. } => Some(*write),
                _ => None,
            })
            .collect();
        assert_eq!(injected, BTreeSet::from([1, 3]));
        assert!(
            !plans.contains(&Perturbation::Inject {
                at: 1,
                write: 1,
                answer: "conflict".into()
            }),
            "a create is never answered with a conflict"
        );
        assert!(!plans.iter().any(|p| p.family() == "unseen"));
    }

    #[test]
    fn a_stale_view_is_offered_only_of_a_cached_object_the_guest_saw_change() {
        let kinds = ["v1/ConfigMap".to_string()];
        let steps = [
            step(vec![write("create", None)], "done", &[]),
            step(vec![], "done", &[(CM, json!({"v": 1}))]),
            step(vec![], "done", &[(CM, json!({"v": 2}))]),
        ];
        let plans = generate(
            &steps,
            &Context {
                cached: &kinds,
                reads_its_writes: true,
                changes: &[],
            },
        );
        let stale: Vec<_> = plans.iter().filter(|p| p.family() == "stale").collect();
        assert_eq!(
            stale,
            [
                &Perturbation::Stale {
                    at: 2,
                    object: CM.into(),
                    seen_at: 1
                },
                &Perturbation::Stale {
                    at: 3,
                    object: CM.into(),
                    seen_at: 2
                },
            ]
        );
        let uncached = generate(
            &steps,
            &Context {
                cached: &[],
                reads_its_writes: true,
                changes: &[],
            },
        );
        assert!(!uncached.iter().any(|p| p.family() == "stale"));
    }

    #[test]
    fn only_two_changes_to_one_object_make_a_state_to_skip() {
        let cm = |data: &str| {
            Change::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": data, "namespace": "default"}}))
        };
        let changes = [cm("a"), cm("a"), cm("b")];
        let plans = generate(
            &[],
            &Context {
                cached: &[],
                reads_its_writes: true,
                changes: &changes,
            },
        );
        assert_eq!(plans, [Perturbation::SkipState { change: 1 }]);
    }

    #[test]
    fn a_budget_takes_every_family_in_turn_and_the_same_seed_takes_the_same_plans() {
        let mut plans: Vec<_> = (1..=50)
            .map(|at| Perturbation::CrashAfterWrite { at, write: 1 })
            .collect();
        plans.push(Perturbation::EarlyRequeue { at: 7 });
        plans.push(Perturbation::UnseenWrites { at: 9 });
        let chosen = select(plans.clone(), 5, 42);
        assert_eq!(chosen.len(), 5);
        assert!(chosen.contains(&Perturbation::EarlyRequeue { at: 7 }));
        assert!(chosen.contains(&Perturbation::UnseenWrites { at: 9 }));
        assert_eq!(chosen, select(plans.clone(), 5, 42));
        assert_ne!(
            select(plans.clone(), 5, 42),
            select(plans, 5, 43),
            "another seed, other crashes"
        );
    }
}
