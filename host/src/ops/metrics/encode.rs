//! How every family of `/metrics` is written: one descriptor per family, left out when it has no
//! sample, and constant counters, gauges and histograms of what the scrape read.

use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, EncodeMetric,
    MetricEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;

/// Label sets of one or more labels, all of whose values are text.
pub(super) type Labels<'a, const N: usize> = [(&'static str, &'a str); N];

pub(super) const NO_LABELS: Labels<'static, 0> = [];

/// Starts a family and lets `samples` add its samples; writes nothing unless `present` says
/// there is at least one.
///
/// A family without samples is left out, as the official clients leave it out: OpenMetrics
/// allows one, but a parser that groups lines by position cannot tell its `# HELP` and `# TYPE`
/// from the next family's.
///
/// `name` is without the `_total` of a counter, which the encoder appends: OpenMetrics names the
/// family, not the sample. Units are spelled in names and never declared in `# UNIT` lines, as
/// the Go client, and so controller-runtime, writes them.
pub(super) fn family(
    e: &mut DescriptorEncoder,
    (name, help): (&str, &str),
    kind: MetricType,
    present: bool,
    samples: impl FnOnce(&mut MetricEncoder) -> std::fmt::Result,
) -> std::fmt::Result {
    // OpenMetrics help text has no escape for these, unlike 0.0.4's: a bug here, not input.
    debug_assert!(
        !help.contains(['"', '\\', '\n']),
        "help of {name} has a quote, backslash or newline"
    );
    if !present {
        return Ok(());
    }
    let mut m = e.encode_descriptor(name, help, None, kind)?;
    samples(&mut m)
}

pub(super) fn counter(
    m: &mut MetricEncoder,
    labels: &impl EncodeLabelSet,
    value: impl EncodeCounterValue,
) -> std::fmt::Result {
    ConstCounter::new(value).encode(m.encode_family(labels)?)
}

pub(super) fn gauge(
    m: &mut MetricEncoder,
    labels: &impl EncodeLabelSet,
    value: impl EncodeGaugeValue,
) -> std::fmt::Result {
    ConstGauge::new(value).encode(m.encode_family(labels)?)
}

pub(super) fn histogram(
    m: &mut MetricEncoder,
    labels: &impl EncodeLabelSet,
    h: &Histogram,
) -> std::fmt::Result {
    h.encode(m.encode_family(labels)?)
}

/// 1 for yes, 0 for no: the convention for "is this so" gauges.
pub(super) fn flag(b: bool) -> i64 {
    i64::from(b)
}
