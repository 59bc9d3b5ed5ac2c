//! Field selectors, as the API server accepts them.

use std::fmt;

use super::error::{Error, Result, snippet};

/// One term of a [`FieldSelector`]: `field=value` or, when `negated`, `field!=value`.
///
/// `value` is unescaped (a literal `,` is `,` here and `\,` in the string form). Surprise, as in
/// Kubernetes: the API server treats a missing field as the empty string, so `f!=x` selects
/// objects that lack `f` and `f=` selects them too.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldRequirement {
    /// The field path, e.g. `metadata.name` or `spec.nodeName`.
    pub field: String,
    /// The value, unescaped; may be empty.
    pub value: String,
    /// `!=` rather than `=`.
    pub negated: bool,
}

/// A field selector as the API server accepts it: `a.b=c`, `a.b==c`, `a.b!=c`, comma-separated;
/// every term must hold. The empty selector selects everything.
///
/// Only equality and inequality exist for fields. Values may contain `\,`, `\=` and `\\`
/// escapes (apimachinery's `fields.EscapeValue`); other backslash sequences and a bare `=` in a
/// value are errors. Which fields exist depends on the resource and is checked only by the API
/// server; here a field name must be non-empty ASCII letters, digits, `.`, `-` or `_`, which
/// every server-supported field is. Whitespace is not trimmed (the API server would not trim it
/// either), so `a=b, c=d` is an error rather than a selector on a field named ` c`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses the string syntax. Empty terms (`a=b,` or `,,`) are skipped, as apimachinery does.
    pub fn parse(s: &str) -> Result<Self> {
        let mut requirements = Vec::new();
        for (start, term) in split_terms(s) {
            if term.is_empty() {
                continue;
            }
            let Some((op_at, op_len, negated)) = find_operator(term) else {
                return Err(Error::FieldTerm {
                    offset: start,
                    term: snippet(term),
                });
            };
            let field = &term[..op_at];
            if let Some(reason) = field_problem(field) {
                return Err(Error::InvalidField {
                    offset: start,
                    field: snippet(field),
                    reason,
                });
            }
            let value_at = op_at + op_len;
            let value = unescape(&term[value_at..], start + value_at)?;
            requirements.push(FieldRequirement {
                field: field.to_string(),
                value,
                negated,
            });
        }
        requirements.sort_by(|a, b| {
            (a.field.as_str(), a.negated, a.value.as_str()).cmp(&(
                b.field.as_str(),
                b.negated,
                b.value.as_str(),
            ))
        });
        requirements.dedup();
        Ok(Self { requirements })
    }

    /// The terms, sorted by field, then `=` before `!=`, then value; duplicates removed.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// Whether the selector has no terms, i.e. selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

/// Canonical rendering: terms sorted, `==` written as `=`, values re-escaped. The output parses
/// back to an equal selector and is what the API server accepts as `fieldSelector=`.
impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(&r.field)?;
            f.write_str(if r.negated { "!=" } else { "=" })?;
            for c in r.value.chars() {
                if matches!(c, '\\' | ',' | '=') {
                    f.write_str("\\")?;
                }
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// Splits on commas that are not escaped, with each term's byte offset. A backslash skips the
/// next byte; that byte may start a multi-byte character, but continuation bytes are never `,`
/// or `\`, so the split stays on character boundaries.
pub(super) fn split_terms(s: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, b) in s.bytes().enumerate() {
        if escaped {
            escaped = false;
        } else if b == b'\\' {
            escaped = true;
        } else if b == b',' {
            out.push((start, &s[start..i]));
            start = i + 1;
        }
    }
    out.push((start, &s[start..]));
    out
}

/// The first operator in a term: position, length, and whether it is `!=`. The leftmost match
/// wins, as in apimachinery, so `a=b=c` is field `a` with the (invalid) value `b=c`.
pub(super) fn find_operator(term: &str) -> Option<(usize, usize, bool)> {
    let b = term.as_bytes();
    b.iter()
        .enumerate()
        .find_map(|(i, &c)| match (c, b.get(i + 1)) {
            (b'!', Some(b'=')) => Some((i, 2, true)),
            (b'=', Some(b'=')) => Some((i, 2, false)),
            (b'=', _) => Some((i, 1, false)),
            _ => None,
        })
}

pub(super) fn field_problem(field: &str) -> Option<String> {
    if field.is_empty() {
        return Some("it is empty; expected a field path such as metadata.name".to_string());
    }
    let bad = field
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))?;
    Some(format!(
        "it contains {bad:?}; expected letters, digits, '.', '-' or '_' (e.g. metadata.name)"
    ))
}

pub(super) fn unescape(v: &str, base: usize) -> Result<String> {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, e @ ('\\' | ',' | '='))) => out.push(e),
                Some((_, e)) => {
                    return Err(Error::InvalidEscape {
                        offset: base + i,
                        sequence: format!("\\{e}"),
                    });
                }
                None => {
                    return Err(Error::InvalidEscape {
                        offset: base + i,
                        sequence: "\\".into(),
                    });
                }
            },
            // A bare ',' cannot reach here (split_terms consumed it); '=' can.
            '=' | ',' => {
                return Err(Error::UnescapedChar {
                    offset: base + i,
                    ch: c,
                });
            }
            _ => out.push(c),
        }
    }
    Ok(out)
}
