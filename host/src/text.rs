//! Text the host shows: text from outside (guests, tenants, the API server) made safe, and
//! times written as Kubernetes writes them.

/// `text` with every control character (newlines included) replaced by a space: guest-made
/// text goes into the host's log lines, Events and status one line each, never forging more.
pub fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// `t` as RFC 3339 in UTC, to the second, as Kubernetes writes times (`2026-01-01T00:00:00Z`);
/// empty for a time outside what a timestamp can hold.
pub(crate) fn rfc3339(t: std::time::SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(t)
        .map(|t| {
            t.round(k8s_openapi::jiff::Unit::Second)
                .unwrap_or(t)
                .to_string()
        })
        .unwrap_or_default()
}

/// `t` as RFC 3339 in UTC with microseconds, as Kubernetes writes a `metav1.MicroTime`
/// (`2026-01-01T00:00:00.123456Z`): cut, never rounded, so that it never reads later than `t`;
/// empty for a time outside what a timestamp can hold.
pub(crate) fn micro_time(t: std::time::SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(t)
        .map(|t| {
            let micros = t.as_microsecond();
            let cut = k8s_openapi::jiff::Timestamp::from_microsecond(micros).unwrap_or(t);
            format!("{cut:.6}")
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_micro_time_is_cut_to_the_microsecond_and_never_reads_later() {
        use std::time::{Duration, UNIX_EPOCH};
        let t = UNIX_EPOCH + Duration::from_nanos(1_767_225_600_123_456_999);
        assert_eq!(micro_time(t), "2026-01-01T00:00:00.123456Z");
        let whole = UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        assert_eq!(micro_time(whole), "2026-01-01T00:00:00.000000Z");
        assert_eq!(rfc3339(t), "2026-01-01T00:00:00Z");
    }

    #[test]
    fn control_characters_cannot_start_a_new_line() {
        assert_eq!(one_line("a\nb\r\x1b[31mc\td"), "a b  [31mc d");
    }
}
