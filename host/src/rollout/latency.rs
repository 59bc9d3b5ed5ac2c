//! Whether a new revision reconciles more slowly than the serving one: a judgement over two
//! samples of reconcile times of the same kind of work (reconciles of live changes). Pure.
//!
//! Where it may surprise:
//! - A ratio of p99s alone is judged on the tail, and the tail of a few dozen samples is one or
//!   two of them: a pause of the machine or of the API server during one reconcile would roll
//!   back a good revision. So a step fails for latency only when the ratio is exceeded *and*
//!   the new revision is slower as a whole: a one-sided Mann-Whitney U test (rank-based, so the
//!   size of an outlier does not matter) at the 0.1% level. A revision slower only in its tail
//!   passes.
//! - The p99s compare as many samples on each side, the most recent ones: a p99 of 30 samples
//!   is their largest, and it is compared with the largest of 30, not with the 99th
//!   percentile of a longer history.

use std::time::Duration;

/// The one-sided 0.1% point of the standard normal distribution: a `z` above it happens by
/// chance once in a thousand judgements of two revisions that are equally fast.
const Z_CRITICAL: f64 = 3.09;

/// What the latency analysis found.
#[derive(Debug, Clone, PartialEq)]
pub enum Judgement {
    /// Too few samples on one side to judge.
    TooFew {
        /// Samples of the new revision, and of the serving one.
        candidate: usize,
        serving: usize,
    },
    /// The new revision is not slower by the ratio, or not slower as a whole.
    Within {
        p99: Duration,
        serving_p99: Duration,
    },
    /// The new revision is slower by more than the ratio at the p99, and slower as a whole.
    Slower {
        p99: Duration,
        serving_p99: Duration,
        /// The test's statistic: how many standard deviations the new revision's ranks lie
        /// above what equally fast revisions would give.
        z: f64,
    },
}

/// Judges `candidate` against `serving` (each in the order the reconciles ran, oldest first):
/// slower when the p99 of the candidate's most recent samples is more than `ratio` times the
/// serving's, over as many of each, and the Mann-Whitney test finds the candidate slower.
/// Needs `min` samples on each side.
pub fn judge(candidate: &[Duration], serving: &[Duration], ratio: f64, min: usize) -> Judgement {
    let min = min.max(1);
    if candidate.len() < min || serving.len() < min {
        return Judgement::TooFew {
            candidate: candidate.len(),
            serving: serving.len(),
        };
    }
    let n = candidate.len().min(serving.len());
    let (c, s) = (
        &candidate[candidate.len() - n..],
        &serving[serving.len() - n..],
    );
    let (p99, serving_p99) = (p99(c), p99(s));
    let z = mann_whitney_z(c, s);
    if p99.as_secs_f64() > serving_p99.as_secs_f64() * ratio && z > Z_CRITICAL {
        Judgement::Slower {
            p99,
            serving_p99,
            z,
        }
    } else {
        Judgement::Within { p99, serving_p99 }
    }
}

/// The 99th percentile of `times` (nearest rank); zero for none.
pub fn p99(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let rank = (sorted.len() * 99).div_ceil(100).max(1);
    sorted.get(rank - 1).copied().unwrap_or_default()
}

/// The normal approximation of the Mann-Whitney U statistic of `a` against `b`, with ties
/// given their average rank and the variance corrected for them: positive when `a` tends to
/// be larger. Zero when every value is the same.
fn mann_whitney_z(a: &[Duration], b: &[Duration]) -> f64 {
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let mut all: Vec<(Duration, bool)> = a
        .iter()
        .map(|&t| (t, true))
        .chain(b.iter().map(|&t| (t, false)))
        .collect();
    all.sort_unstable_by_key(|(t, _)| *t);
    let (mut rank_sum_a, mut ties) = (0.0, 0.0);
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j < all.len() && all[j].0 == all[i].0 {
            j += 1;
        }
        // Ranks i+1 ..= j share their average.
        let average = (i + 1 + j) as f64 / 2.0;
        rank_sum_a += average * all[i..j].iter().filter(|(_, in_a)| *in_a).count() as f64;
        let t = (j - i) as f64;
        ties += t * t * t - t;
        i = j;
    }
    let u = rank_sum_a - na * (na + 1.0) / 2.0;
    let n = na + nb;
    let variance = na * nb / 12.0 * ((n + 1.0) - ties / (n * (n - 1.0)));
    if variance <= 0.0 {
        return 0.0;
    }
    (u - na * nb / 2.0) / variance.sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[f64]) -> Vec<Duration> {
        v.iter()
            .map(|&m| Duration::from_secs_f64(m / 1e3))
            .collect()
    }

    /// `n` times around `center` ms, spread deterministically by ±`spread`.
    fn around(center: f64, spread: f64, n: usize) -> Vec<Duration> {
        ms(&(0..n)
            .map(|i| center + spread * (((i * 37) % 17) as f64 / 8.0 - 1.0))
            .collect::<Vec<_>>())
    }

    #[test]
    fn too_few_samples_on_either_side_are_not_judged() {
        let j = judge(&around(5.0, 1.0, 10), &around(1.0, 0.1, 100), 2.0, 30);
        assert_eq!(
            j,
            Judgement::TooFew {
                candidate: 10,
                serving: 100
            }
        );
    }

    #[test]
    fn a_revision_slower_as_a_whole_and_by_the_ratio_is_slower() {
        let j = judge(&around(10.0, 1.0, 40), &around(2.0, 0.5, 200), 2.0, 30);
        let Judgement::Slower {
            p99,
            serving_p99,
            z,
        } = j
        else {
            panic!("{j:?}")
        };
        assert!(p99 > serving_p99 * 4, "{p99:?} {serving_p99:?}");
        assert!(z > Z_CRITICAL, "{z}");
    }

    #[test]
    fn a_few_slow_outliers_in_a_good_revision_are_not_slower() {
        // The false rollback of a good revision: the same work, one pause of the machine in
        // the candidate's sample. Its p99 is ten times the serving's, but its ranks are not
        // higher as a whole.
        let mut candidate = around(5.0, 1.0, 40);
        candidate[7] = Duration::from_millis(60);
        let serving = around(5.0, 1.0, 40);
        let j = judge(&candidate, &serving, 2.0, 30);
        assert!(matches!(j, Judgement::Within { .. }), "{j:?}");
    }

    #[test]
    fn a_revision_slower_as_a_whole_but_within_the_ratio_passes() {
        let j = judge(&around(6.0, 0.5, 50), &around(5.0, 0.5, 50), 2.0, 30);
        assert!(matches!(j, Judgement::Within { .. }), "{j:?}");
    }

    #[test]
    fn the_p99s_compare_as_many_recent_samples_on_each_side() {
        // Two hundred fast serving samples, then thirty as slow as the candidate's: the
        // candidate is compared with the latest thirty alone.
        let mut serving = around(1.0, 0.1, 200);
        serving.extend(around(8.0, 1.0, 30));
        let j = judge(&around(8.0, 1.0, 30), &serving, 2.0, 30);
        assert!(matches!(j, Judgement::Within { .. }), "{j:?}");
    }

    #[test]
    fn identical_samples_give_no_evidence() {
        let same = vec![Duration::from_millis(3); 50];
        assert_eq!(mann_whitney_z(&same, &same), 0.0);
        assert!(matches!(
            judge(&same, &same, 1.0, 30),
            Judgement::Within { .. }
        ));
    }

    #[test]
    fn p99_is_the_nearest_rank() {
        assert_eq!(p99(&[]), Duration::ZERO);
        let hundred = ms(&(1..=100).map(f64::from).collect::<Vec<_>>());
        assert_eq!(p99(&hundred), Duration::from_millis(99));
    }
}
