//! Prometheus text exposition (format 0.0.4), written by hand: the host exposes a few dozen
//! series built fresh on every scrape, which does not need a registry.
//!
//! ```
//! use reconciled::metrics::{Exposition, Kind};
//!
//! let mut e = Exposition::new();
//! e.family("reconciled_reconciles_total", "Reconciles finished, by guest and outcome.", Kind::Counter)
//!     .sample(&[("guest", "cmgen"), ("outcome", "ok")], 10u64)
//!     .sample(&[("guest", "cmgen"), ("outcome", "failed")], 1u64);
//! e.family("reconciled_guests_serving", "Guests serving reconciles.", Kind::Gauge)
//!     .sample(&[], 1u64);
//! assert!(e.finish().contains("reconciled_reconciles_total{guest=\"cmgen\",outcome=\"ok\"} 10\n"));
//! ```

use std::collections::HashSet;
use std::fmt::Write as _;

/// Builds the text of one scrape.
///
/// Names are checked only in debug builds: they come from the host's code, not from users, and
/// a bad one is a bug. In release builds an invalid name is written as given, and Prometheus
/// then rejects the whole scrape, not just that family. Label *values* may be anything; they
/// are escaped.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
    /// The family samples go to; `None` before the first [`Exposition::family`].
    current: Option<String>,
    /// Every family started, to catch a name started twice (Prometheus rejects the scrape).
    started: HashSet<String>,
}

/// A family's type, rendered on its `# TYPE` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only ever goes up, except to restart from zero with the process.
    Counter,
    /// Goes up and down.
    Gauge,
}

/// A sample's value.
///
/// Integers render without a decimal point. Floats render in Rust's shortest round-trip form,
/// switching to exponent notation outside 1e-6..1e15 so a huge value does not print hundreds
/// of digits; NaN and the infinities render as `NaN`, `+Inf` and `-Inf`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// A count or other whole number.
    Int(u64),
    /// Anything else, such as seconds.
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(v)
    }
}

impl From<usize> for Value {
    fn from(v: usize) -> Self {
        // usize is at most 64 bits on every target the host builds for.
        Value::Int(v as u64)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}

impl From<bool> for Value {
    /// `true` is 1, `false` is 0: the Prometheus convention for "is this so" gauges.
    fn from(v: bool) -> Self {
        Value::Int(u64::from(v))
    }
}

impl Exposition {
    /// An empty scrape.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a family; the samples that follow belong to it. Families render in the order
    /// started, and a family without samples still renders its `# HELP` and `# TYPE` lines.
    ///
    /// # Panics
    ///
    /// In debug builds, if `name` is not a valid metric name or was started before: both are
    /// bugs, and Prometheus would reject the whole scrape for them.
    pub fn family(&mut self, name: &str, help: &str, kind: Kind) -> &mut Self {
        debug_assert!(is_metric_name(name), "invalid metric name {name:?}");
        let first = self.started.insert(name.to_owned());
        debug_assert!(first, "metric family {name:?} started twice");
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let _ = writeln!(self.out, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        self.current = Some(name.to_owned());
        self
    }

    /// Adds a sample to the current family, labels in the order given; an empty `labels`
    /// renders no braces at all.
    ///
    /// # Panics
    ///
    /// In debug builds, if no family was started or a label name is invalid or repeated. In
    /// release builds a sample without a family is dropped rather than written nameless, which
    /// would make Prometheus reject the whole scrape.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: impl Into<Value>) -> &mut Self {
        debug_assert!(self.current.is_some(), "sample before any metric family");
        let Some(name) = &self.current else {
            return self;
        };
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (label, value)) in labels.iter().enumerate() {
                debug_assert!(is_label_name(label), "invalid label name {label:?}");
                debug_assert!(
                    labels[..i].iter().all(|(l, _)| l != label),
                    "label {label:?} repeated in a sample of {name}"
                );
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{label}=\"{}\"", escape_label_value(value));
            }
            self.out.push('}');
        }
        self.out.push(' ');
        write_value(&mut self.out, value.into());
        self.out.push('\n');
        self
    }

    /// The text, ready to serve with content type `text/plain; version=0.0.4; charset=utf-8`.
    pub fn finish(self) -> String {
        self.out
    }
}

fn write_value(out: &mut String, value: Value) {
    let _ = match value {
        Value::Int(v) => write!(out, "{v}"),
        Value::Float(v) if v.is_nan() => write!(out, "NaN"),
        Value::Float(v) if v == f64::INFINITY => write!(out, "+Inf"),
        Value::Float(v) if v == f64::NEG_INFINITY => write!(out, "-Inf"),
        Value::Float(v) if v != 0.0 && !(1e-6..1e15).contains(&v.abs()) => write!(out, "{v:e}"),
        Value::Float(v) => write!(out, "{v}"),
    };
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`; labels are the same without colons.
fn is_name(name: &str, colon: bool) -> bool {
    let ok = |c: char| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':');
    let mut chars = name.chars();
    chars.next().is_some_and(ok) && chars.all(|c| ok(c) || c.is_ascii_digit())
}

fn is_metric_name(name: &str) -> bool {
    is_name(name, true)
}

fn is_label_name(name: &str) -> bool {
    is_name(name, false)
}

/// HELP text escapes backslash and newline only; a quote is literal there.
fn escape_help(s: &str) -> String {
    s.replace('\\', r"\\").replace('\n', r"\n")
}

fn escape_label_value(s: &str) -> String {
    s.replace('\\', r"\\")
        .replace('"', r#"\""#)
        .replace('\n', r"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_render_in_order_with_help_type_and_samples() {
        let mut e = Exposition::new();
        e.family("b_total", "Second letter, first family.", Kind::Counter)
            .sample(&[("guest", "x"), ("outcome", "ok")], 3u64)
            .sample(&[("guest", "y"), ("outcome", "ok")], 0u64);
        e.family("a_empty", "Has no samples.", Kind::Gauge);
        e.family(
            "c:ratio",
            "Colons are allowed in metric names.",
            Kind::Gauge,
        )
        .sample(&[], 0.5);
        assert_eq!(
            e.finish(),
            "# HELP b_total Second letter, first family.\n\
             # TYPE b_total counter\n\
             b_total{guest=\"x\",outcome=\"ok\"} 3\n\
             b_total{guest=\"y\",outcome=\"ok\"} 0\n\
             # HELP a_empty Has no samples.\n\
             # TYPE a_empty gauge\n\
             # HELP c:ratio Colons are allowed in metric names.\n\
             # TYPE c:ratio gauge\n\
             c:ratio 0.5\n"
        );
    }

    #[test]
    fn escapes_label_values_and_help() {
        let mut e = Exposition::new();
        e.family("m", "a \\ b \"q\"\nnext", Kind::Gauge)
            .sample(&[("err", "say \"no\"\\n\nnow")], 1u64);
        assert_eq!(
            e.finish(),
            "# HELP m a \\\\ b \"q\"\\nnext\n\
             # TYPE m gauge\n\
             m{err=\"say \\\"no\\\"\\\\n\\nnow\"} 1\n"
        );
    }

    #[test]
    fn integers_have_no_decimal_point_and_floats_round_trip() {
        let render = |v: Value| {
            let mut e = Exposition::new();
            e.family("m", "h", Kind::Gauge).sample(&[], v);
            e.finish().lines().last().unwrap().to_owned()
        };
        assert_eq!(render(u64::MAX.into()), "m 18446744073709551615");
        assert_eq!(render(7usize.into()), "m 7");
        assert_eq!(render(true.into()), "m 1");
        assert_eq!(render(false.into()), "m 0");
        assert_eq!(render(2.0.into()), "m 2");
        assert_eq!(render(0.25.into()), "m 0.25");
        assert_eq!(render(0.1.into()), "m 0.1");
        assert_eq!(render((-3.5).into()), "m -3.5");
        assert_eq!(render(0.0.into()), "m 0");
        assert_eq!(render(1e300.into()), "m 1e300");
        assert_eq!(render(1.5e-9.into()), "m 1.5e-9");
        assert_eq!(render(123_456_789.0.into()), "m 123456789");
    }

    #[test]
    fn special_floats_use_the_spec_spelling() {
        let mut e = Exposition::new();
        e.family("m", "h", Kind::Gauge)
            .sample(&[("v", "nan")], f64::NAN)
            .sample(&[("v", "inf")], f64::INFINITY)
            .sample(&[("v", "-inf")], f64::NEG_INFINITY);
        assert_eq!(
            e.finish(),
            "# HELP m h\n# TYPE m gauge\nm{v=\"nan\"} NaN\nm{v=\"inf\"} +Inf\nm{v=\"-inf\"} -Inf\n"
        );
    }

    #[test]
    fn empty_label_set_renders_without_braces() {
        let mut e = Exposition::new();
        e.family("up", "h", Kind::Gauge).sample(&[], true);
        assert_eq!(e.finish(), "# HELP up h\n# TYPE up gauge\nup 1\n");
    }

    #[test]
    fn name_rules() {
        assert!(is_metric_name("reconciled_x:y_1") && is_metric_name(":a") && is_metric_name("_"));
        assert!(!is_metric_name("") && !is_metric_name("1a") && !is_metric_name("a-b"));
        assert!(is_label_name("guest_2") && is_label_name("_x"));
        assert!(!is_label_name("a:b") && !is_label_name("é") && !is_label_name("9"));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "metric family \"m\" started twice")]
    fn starting_a_family_twice_panics_in_debug() {
        let mut e = Exposition::new();
        e.family("m", "h", Kind::Gauge)
            .family("m", "h", Kind::Gauge);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "invalid label name \"a:b\"")]
    fn a_label_name_with_a_colon_panics_in_debug() {
        Exposition::new()
            .family("m", "h", Kind::Gauge)
            .sample(&[("a:b", "v")], 1u64);
    }
}
