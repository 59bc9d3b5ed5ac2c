//! Text from outside the host (guests, tenants, the API server), made safe to show.

/// `text` with every control character (newlines included) replaced by a space: guest-made
/// text goes into the host's log lines, Events and status one line each, never forging more.
pub fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_cannot_start_a_new_line() {
        assert_eq!(one_line("a\nb\r\x1b[31mc\td"), "a b  [31mc d");
    }
}
