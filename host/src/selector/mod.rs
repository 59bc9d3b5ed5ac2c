//! Label and field selectors: parsed once, matched against cached objects, rendered for API queries.

mod field;
mod parse;
mod validate;

pub use field::{FieldRequirement, FieldSelector};
use parse::*;
use validate::*;

use std::fmt;

use serde_json::Value;

/// Errors from parsing a selector, in either the string syntax or the API's structured form.
///
/// Offending keys, values and tokens are shortened to 64 characters, so a hostile megabyte-long
/// selector cannot turn into a megabyte-long log line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The selector string does not follow the grammar.
    #[error("at byte {offset}: found {found}, expected {expected}")]
    Syntax {
        /// Byte offset of the offending token in the input.
        offset: usize,
        /// The offending token, quoted, or `end of input`.
        found: String,
        /// What the grammar allows at that point.
        expected: &'static str,
    },
    /// A `>` or `<` requirement: Kubernetes accepts them in list queries, but [`Operator`] has no
    /// numeric comparisons, so matching against the cache could not agree with the server.
    #[error(
        "at byte {offset}: operator '{operator}' is not supported; expected =, ==, !=, in or notin"
    )]
    UnsupportedOperator {
        /// Byte offset of the operator in the input.
        offset: usize,
        /// The operator as written.
        operator: &'static str,
    },
    /// A label key that Kubernetes would reject.
    #[error("invalid label key {key:?} at {at}: {reason}")]
    InvalidKey {
        /// Where: `byte N` in a selector string, or a path such as `matchExpressions[0].key`.
        at: String,
        /// The offending key.
        key: String,
        /// What is wrong with it and what is expected instead.
        reason: String,
    },
    /// A label value that Kubernetes would reject.
    #[error("invalid value {value:?} for label key {key:?} at {at}: {reason}")]
    InvalidValue {
        /// Where: `byte N` in a selector string, or a path such as `matchLabels[app]`.
        at: String,
        /// The key the value belongs to.
        key: String,
        /// The offending value.
        value: String,
        /// What is wrong with it and what is expected instead.
        reason: String,
    },
    /// The structured (API) form of a label selector has the wrong JSON shape.
    #[error("invalid label selector at {at}: expected {expected}, found {found}")]
    Shape {
        /// A path such as `matchExpressions[1].operator`.
        at: String,
        /// What the API schema allows there.
        expected: &'static str,
        /// What was there instead.
        found: String,
    },
    /// A `matchExpressions` entry whose operator and values do not fit together.
    #[error("invalid label selector at {at}: {reason}")]
    Expression {
        /// A path such as `matchExpressions[0].values`.
        at: String,
        /// What is wrong and what is expected instead.
        reason: String,
    },
    /// A field selector term with no `=`, `==` or `!=` in it.
    #[error(
        "field selector term {term:?} at byte {offset} has no operator; expected <field>=<value>, <field>==<value> or <field>!=<value>"
    )]
    FieldTerm {
        /// Byte offset of the term in the input.
        offset: usize,
        /// The offending term.
        term: String,
    },
    /// A field name that no API server accepts.
    #[error("invalid field name {field:?} at byte {offset}: {reason}")]
    InvalidField {
        /// Byte offset of the field name in the input.
        offset: usize,
        /// The offending field name.
        field: String,
        /// What is wrong with it and what is expected instead.
        reason: String,
    },
    /// A backslash in a field selector value that does not escape `\`, `,` or `=`.
    #[error(
        "invalid escape {sequence:?} at byte {offset} in a field selector value; expected \\\\, \\, or \\="
    )]
    InvalidEscape {
        /// Byte offset of the backslash in the input.
        offset: usize,
        /// The sequence as written (a lone `\` when the input ends after it).
        sequence: String,
    },
    /// A bare `=` in a field selector value; the API server rejects it unless escaped.
    #[error(
        "unescaped {ch:?} at byte {offset} in a field selector value; expected it escaped as \\{ch}"
    )]
    UnescapedChar {
        /// Byte offset of the character in the input.
        offset: usize,
        /// The character.
        ch: char,
    },
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a [`Requirement`] relates a label to its values.
///
/// There is no `DoubleEquals`: `a==b` parses to [`Operator::Equals`] and renders as `a=b`.
/// There are no `Gt`/`Lt`: selectors using them are rejected at parse time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// The label is present and has the one value.
    Equals,
    /// The label is absent, or present with a different value. Surprise: an object without the
    /// label matches, as in Kubernetes.
    NotEquals,
    /// The label is present and has one of the values.
    In,
    /// The label is absent, or present with none of the values. Surprise: an object without the
    /// label matches, as in Kubernetes.
    NotIn,
    /// The label is present, with any value (including the empty one).
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl Operator {
    /// Sort rank for the canonical rendering; a declared order rather than a derived `Ord` so the
    /// public type does not promise an ordering nobody asked for.
    fn rank(self) -> u8 {
        match self {
            Self::Equals => 0,
            Self::NotEquals => 1,
            Self::In => 2,
            Self::NotIn => 3,
            Self::Exists => 4,
            Self::DoesNotExist => 5,
        }
    }
}

/// One requirement of a [`LabelSelector`]: a key, an operator and values.
///
/// Values are sorted and deduplicated; they are empty for [`Operator::Exists`] and
/// [`Operator::DoesNotExist`] and exactly one for [`Operator::Equals`] and
/// [`Operator::NotEquals`]. The empty string is a valid value: `a=` requires the label to be
/// present and empty, and `a in ()` means the same (a Kubernetes quirk, kept for agreement with
/// the API server).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// Builds a requirement from parts that have already been validated.
    fn new(key: &str, operator: Operator, mut values: Vec<String>) -> Self {
        values.sort_unstable();
        values.dedup();
        Self {
            key: key.to_string(),
            operator,
            values,
        }
    }

    /// The label key, e.g. `app.kubernetes.io/name`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, sorted and deduplicated.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether a label value satisfies this requirement; `None` means the object does not have
    /// the label. Surprise: [`Operator::NotIn`] and [`Operator::NotEquals`] return `true` for
    /// `None`, as Kubernetes does.
    pub fn matches(&self, label: Option<&str>) -> bool {
        let has = |v: &str| self.values.binary_search_by(|x| x.as_str().cmp(v)).is_ok();
        match self.operator {
            Operator::Equals | Operator::In => label.is_some_and(has),
            Operator::NotEquals | Operator::NotIn => label.is_none_or(|v| !has(v)),
            Operator::Exists => label.is_some(),
            Operator::DoesNotExist => label.is_none(),
        }
    }
}

/// Renders one requirement in the string syntax, e.g. `a in (x,y)` or `!a`.
impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = &self.key;
        let first = self.values.first().map_or("", String::as_str);
        match self.operator {
            Operator::Equals => write!(f, "{key}={first}"),
            Operator::NotEquals => write!(f, "{key}!={first}"),
            Operator::Exists => write!(f, "{key}"),
            Operator::DoesNotExist => write!(f, "!{key}"),
            Operator::In | Operator::NotIn => {
                let op = if self.operator == Operator::In {
                    "in"
                } else {
                    "notin"
                };
                write!(f, "{key} {op} (")?;
                // The empty value sorts first and renders as nothing, so `(,x)` and `()` come
                // out, which the parser (ours and Kubernetes') reads back as the same set.
                for (i, v) in self.values.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    f.write_str(v)?;
                }
                f.write_str(")")
            }
        }
    }
}

/// A label selector: requirements that must all hold. The empty selector matches everything.
///
/// Requirements are kept sorted (by key, then operator, then values) and deduplicated, so two
/// selectors that differ only in order or repetition compare and hash equal.
///
/// Surprise: there is no "nothing" selector. The API's `null` selector (which matches no
/// objects) is rejected by [`LabelSelector::from_api`] rather than turned into "everything".
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses the Kubernetes string syntax: `a=b`, `a==b`, `a!=b`, `a in (x,y)`,
    /// `a notin (x)`, `a`, `!a`, comma-separated, with spaces, tabs and newlines allowed between
    /// tokens. Keys and values are validated as Kubernetes validates them.
    ///
    /// Where it may surprise: the empty string parses to the selector that matches everything;
    /// `a=` and `a in ()` require the label to be present with the empty value (as in
    /// Kubernetes); `in` and `notin` are ordinary keys and values outside the operator position;
    /// `>` and `<` are rejected although Kubernetes list queries accept them.
    pub fn parse(s: &str) -> Result<Self> {
        let mut parser = Parser::new(s);
        let mut requirements = Vec::new();
        if parser.peek().tok == Tok::End {
            return Ok(Self::default());
        }
        loop {
            requirements.push(parser.requirement()?);
            let t = parser.bump();
            match t.tok {
                Tok::End => break,
                Tok::Comma => {
                    let next = parser.peek();
                    if !matches!(next.tok, Tok::Ident(_) | Tok::Bang) {
                        return Err(unexpected(next, "a requirement after ','"));
                    }
                }
                _ => return Err(unexpected(t, "',' or end of input")),
            }
        }
        Ok(Self::from_requirements(requirements))
    }

    /// Builds a selector from the API's structured form, given as JSON:
    /// `{"matchLabels": {"k": "v"}, "matchExpressions": [{"key": "k", "operator": "In",
    /// "values": ["v"]}]}`. `matchLabels` entries become [`Operator::Equals`] requirements.
    ///
    /// Rejects what Kubernetes rejects (an unknown operator, `In`/`NotIn` without values,
    /// `Exists`/`DoesNotExist` with values, invalid keys or values) and, stricter than the API
    /// server's decoder, unknown fields: a misspelt `matchLabel` would otherwise silently select
    /// everything. A JSON `null` selector is rejected, because in Kubernetes it matches nothing
    /// and this type cannot say that; `{}` is the selector that matches everything.
    pub fn from_api(v: &Value) -> Result<Self> {
        let Some(obj) = v.as_object() else {
            return Err(shape("labelSelector", "a JSON object", v));
        };
        let mut requirements = Vec::new();
        for (field, value) in obj {
            match (field.as_str(), value) {
                (_, Value::Null) if field == "matchLabels" || field == "matchExpressions" => {}
                ("matchLabels", Value::Object(labels)) => {
                    for (key, value) in labels {
                        let at = format!("matchLabels[{}]", snippet(key));
                        check_key(key, &at)?;
                        let Some(value) = value.as_str() else {
                            return Err(shape(&at, "a string label value", value));
                        };
                        check_value(key, value, &at)?;
                        requirements.push(Requirement::new(
                            key,
                            Operator::Equals,
                            vec![value.to_string()],
                        ));
                    }
                }
                ("matchLabels", other) => {
                    return Err(shape(
                        "matchLabels",
                        "an object of label keys to values",
                        other,
                    ));
                }
                ("matchExpressions", Value::Array(items)) => {
                    for (i, item) in items.iter().enumerate() {
                        requirements.push(expression_from_api(item, i)?);
                    }
                }
                ("matchExpressions", other) => {
                    return Err(shape("matchExpressions", "an array of expressions", other));
                }
                _ => {
                    return Err(Error::Shape {
                        at: "labelSelector".to_string(),
                        expected: "only the fields matchLabels and matchExpressions",
                        found: format!("field {:?}", snippet(field)),
                    });
                }
            }
        }
        Ok(Self::from_requirements(requirements))
    }

    /// The selector that matches every object; the same as [`LabelSelector::default`] and as
    /// parsing the empty string.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Whether the selector has no requirements, i.e. matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The requirements, in canonical order (by key, then operator, then values).
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether an object's labels satisfy every requirement.
    ///
    /// `label` looks a label up by key, e.g. `|k| obj.label(k)` for a cached
    /// [`crate::object::Object`]; the value it returns may borrow from anything that outlives the
    /// call (`'a`), not from the key. Where it may surprise: `notin` and `!=` requirements match
    /// objects that lack the label, as in Kubernetes.
    pub fn matches<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| r.matches(label(&r.key)))
    }

    fn from_requirements(mut requirements: Vec<Requirement>) -> Self {
        requirements.sort_by(|a, b| {
            a.key
                .cmp(&b.key)
                .then(a.operator.rank().cmp(&b.operator.rank()))
                .then_with(|| a.values.cmp(&b.values))
        });
        requirements.dedup();
        Self { requirements }
    }
}

/// Canonical rendering: requirements in canonical order, comma-separated, `==` written as `=`.
/// The output parses back to an equal selector and is what the API server accepts as
/// `labelSelector=` (URL-encode it; it may contain spaces and parentheses). The empty selector
/// renders as the empty string.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

fn expression_from_api(item: &Value, i: usize) -> Result<Requirement> {
    let at = |field: &str| format!("matchExpressions[{i}]{field}");
    let Some(obj) = item.as_object() else {
        return Err(shape(
            &at(""),
            "an object with key, operator and values",
            item,
        ));
    };
    if let Some(field) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "key" | "operator" | "values"))
    {
        return Err(Error::Shape {
            at: at(""),
            expected: "only the fields key, operator and values",
            found: format!("field {:?}", snippet(field)),
        });
    }
    let key = match obj.get("key") {
        Some(Value::String(k)) => k.as_str(),
        other => {
            return Err(shape(
                &at(".key"),
                "a string label key",
                other.unwrap_or(&Value::Null),
            ));
        }
    };
    check_key(key, &at(".key"))?;
    let operator = match obj.get("operator") {
        Some(Value::String(op)) => match op.as_str() {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            _ => {
                return Err(Error::Shape {
                    at: at(".operator"),
                    expected: "one of In, NotIn, Exists or DoesNotExist",
                    found: format!("{:?}", snippet(op)),
                });
            }
        },
        other => {
            let other = other.unwrap_or(&Value::Null);
            return Err(shape(
                &at(".operator"),
                "one of In, NotIn, Exists or DoesNotExist",
                other,
            ));
        }
    };
    let mut values = Vec::new();
    match obj.get("values") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (j, v) in items.iter().enumerate() {
                let at = at(&format!(".values[{j}]"));
                let Some(v) = v.as_str() else {
                    return Err(shape(&at, "a string label value", v));
                };
                check_value(key, v, &at)?;
                values.push(v.to_string());
            }
        }
        Some(other) => return Err(shape(&at(".values"), "an array of strings", other)),
    }
    match operator {
        Operator::In | Operator::NotIn if values.is_empty() => Err(Error::Expression {
            at: at(".values"),
            reason: format!("operator {operator:?} needs at least one value; found none"),
        }),
        Operator::Exists | Operator::DoesNotExist if !values.is_empty() => Err(Error::Expression {
            at: at(".values"),
            reason: format!(
                "operator {operator:?} takes no values; found {}",
                values.len()
            ),
        }),
        _ => Ok(Requirement::new(key, operator, values)),
    }
}

fn shape(at: &str, expected: &'static str, found: &Value) -> Error {
    let found = crate::object::kind_of(found);
    Error::Shape {
        at: at.to_string(),
        expected,
        found: found.to_string(),
    }
}

/// The first 64 characters of `s`, so errors stay readable whatever the input.
fn snippet(s: &str) -> String {
    const MAX: usize = 64;
    match s.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}…", &s[..end]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::field::*;
    use super::*;
    use crate::object::{Object, Transform};
    use serde_json::json;

    fn obj(labels: Value) -> Object {
        let v = json!({"metadata": {"name": "x", "labels": labels}});
        Object::from_value(v, &Transform::none(), None).unwrap()
    }

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    fn err(s: &str) -> String {
        match LabelSelector::parse(s) {
            Ok(v) => panic!("{s:?} parsed as {v:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn field_err(s: &str) -> String {
        match FieldSelector::parse(s) {
            Ok(v) => panic!("{s:?} parsed as {v:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn one(s: &str) -> (String, Operator, Vec<String>) {
        let parsed = sel(s);
        assert_eq!(parsed.requirements().len(), 1, "{s:?}");
        let r = &parsed.requirements()[0];
        (r.key().to_string(), r.operator(), r.values().to_vec())
    }

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_every_operator() {
        assert_eq!(one("a=b"), ("a".into(), Operator::Equals, strs(&["b"])));
        assert_eq!(one("a==b"), ("a".into(), Operator::Equals, strs(&["b"])));
        assert_eq!(one("a!=b"), ("a".into(), Operator::NotEquals, strs(&["b"])));
        assert_eq!(
            one("a in (x,y)"),
            ("a".into(), Operator::In, strs(&["x", "y"]))
        );
        assert_eq!(
            one("a notin (x)"),
            ("a".into(), Operator::NotIn, strs(&["x"]))
        );
        assert_eq!(one("a"), ("a".into(), Operator::Exists, vec![]));
        assert_eq!(one("!a"), ("a".into(), Operator::DoesNotExist, vec![]));
        assert_eq!(
            one("app.kubernetes.io/name=web"),
            (
                "app.kubernetes.io/name".into(),
                Operator::Equals,
                strs(&["web"])
            )
        );
        assert_eq!(sel("a=b,c!=d,e in (f),!g,h").requirements().len(), 5);
    }

    #[test]
    fn tolerates_whitespace_between_tokens() {
        let spaced = sel("  a  =  b ,\tc in ( x , y )\n, ! d ,e  notin(z)\r\n");
        assert_eq!(spaced, sel("a=b,c in (x,y),!d,e notin (z)"));
        assert!(sel("   ").is_empty());
    }

    #[test]
    fn in_and_notin_are_ordinary_words_outside_the_operator_position() {
        assert_eq!(
            one("in in (in,notin)"),
            ("in".into(), Operator::In, strs(&["in", "notin"]))
        );
        assert_eq!(
            one("notin=in"),
            ("notin".into(), Operator::Equals, strs(&["in"]))
        );
    }

    #[test]
    fn set_values_are_sorted_and_deduplicated() {
        assert_eq!(one("a in (z,x,z,y)").2, strs(&["x", "y", "z"]));
    }

    #[test]
    fn empty_values_are_allowed_as_in_kubernetes() {
        assert_eq!(one("a=").2, strs(&[""]));
        assert_eq!(sel("a!=,b").requirements()[0].values(), strs(&[""]));
        assert_eq!(one("a in ()").2, strs(&[""]));
        assert_eq!(one("a in (,x)").2, strs(&["", "x"]));
        assert_eq!(one("a in (x,,y,)").2, strs(&["", "x", "y"]));
        let empty = obj(json!({"a": ""}));
        let none = obj(json!({}));
        for s in ["a=", "a in ()", "a in (,x)"] {
            assert!(sel(s).matches(|k| empty.label(k)), "{s:?}");
            assert!(!sel(s).matches(|k| none.label(k)), "{s:?}");
        }
    }

    #[test]
    fn requirements_are_sorted_by_key_then_operator_and_deduplicated() {
        let s = sel("b=1,a notin (x),a=2,a in (x),b=1");
        let keys: Vec<_> = s
            .requirements()
            .iter()
            .map(|r| (r.key(), r.operator()))
            .collect();
        assert_eq!(
            keys,
            vec![
                ("a", Operator::Equals),
                ("a", Operator::In),
                ("a", Operator::NotIn),
                ("b", Operator::Equals)
            ]
        );
        assert_eq!(sel("x=1,y=2"), sel("y=2,x=1"));
    }

    #[test]
    fn rejects_invalid_keys_with_the_reason() {
        let e = err("-a=b");
        assert!(e.contains(r#"invalid label key "-a" at byte 0"#), "{e}");
        assert!(
            e.contains("starting and ending with a letter or digit"),
            "{e}"
        );
        assert!(err("x=1, a_=b").contains(r#"key "a_" at byte 5"#));
        let e = err("Example.com/x");
        assert!(
            e.contains("prefix is not a DNS subdomain") && e.contains("lower-case"),
            "{e}"
        );
        assert!(err("/x").contains("prefix before '/' is empty"));
        assert!(err("a/").contains("name part is empty"));
        assert!(err("a/b/c").contains("more than one '/'"));
        let e = err(&format!("{}=v", "k".repeat(64)));
        assert!(
            e.contains("name part is 64 characters long; expected at most 63"),
            "{e}"
        );
        let e = err(&format!("{}/k", "p".repeat(254)));
        assert!(
            e.contains("prefix is 254 characters long; expected at most 253"),
            "{e}"
        );
        assert!(err("é=v").contains("name part must consist of letters"));
        assert!(err("a\0=b").contains("invalid label key"));
        // The longest valid key and value are accepted.
        sel(&format!(
            "{}/{}={}",
            "p".repeat(253),
            "n".repeat(63),
            "v".repeat(63)
        ));
    }

    #[test]
    fn rejects_invalid_values_with_the_reason() {
        let e = err("a=-x");
        assert!(
            e.contains(r#"invalid value "-x" for label key "a" at byte 2"#),
            "{e}"
        );
        assert!(e.contains("must be empty or consist of"), "{e}");
        assert!(err("a in (ok, bad_)").contains(r#"value "bad_" for label key "a" at byte 10"#));
        let e = err(&format!("a={}", "v".repeat(64)));
        assert!(
            e.contains("value is 64 characters long; expected at most 63"),
            "{e}"
        );
        assert!(err("a=ü").contains("invalid value"));
    }

    #[test]
    fn syntax_errors_say_where_and_what_was_expected() {
        let e = err("a b");
        assert!(
            e.starts_with("at byte 2: found 'b', expected an operator"),
            "{e}"
        );
        assert_eq!(
            err("a=b,"),
            "at byte 4: found end of input, expected a requirement after ','"
        );
        assert_eq!(
            err("a=b,,c"),
            "at byte 4: found ',', expected a requirement after ','"
        );
        assert_eq!(
            err("a in (x"),
            "at byte 7: found end of input, expected ',' or ')' in a value list"
        );
        assert_eq!(
            err("a in x"),
            "at byte 5: found 'x', expected '(' after in/notin"
        );
        assert!(
            err("!a=b")
                .starts_with("at byte 2: found '=', expected ',' or end of input after '!key'")
        );
        assert!(err("a=b c").starts_with("at byte 4: found 'c', expected ',' or end of input"));
        assert_eq!(
            err("a>1"),
            "at byte 1: operator '>' is not supported; expected =, ==, !=, in or notin"
        );
        assert!(err("a<1").contains("operator '<' is not supported"));
    }

    #[test]
    fn hostile_inputs_return_errors_without_panicking() {
        let long_key = "k".repeat(300);
        let long_utf8 = "é".repeat(300);
        let bad = [
            "(",
            ")",
            "a in (",
            "a in",
            "a notin",
            "=b",
            "a=b=c",
            "!",
            "!!a",
            "a!",
            "a in ((x))",
            ",",
            "a,",
            "a=(",
            "a in (x)y",
            "a=b)",
            "==",
            "!=",
            &long_key,
            &long_utf8,
        ];
        for s in bad {
            let e = err(s);
            assert!(e.chars().count() < 400, "error for {s:?} is too long: {e}");
        }
        assert!(err(&long_key).contains("name part is 300 characters long"));
        // Valid in Kubernetes, so valid here: the empty selector and the empty value set.
        assert!(sel("").is_empty());
        assert_eq!(one("a in ()").2, strs(&[""]));

        // Every string of up to four characters from an alphabet of troublemakers: none panics.
        let alphabet = ['a', '=', '!', '(', ')', ',', ' ', 'é', '\\', '>', 'n', '/'];
        let mut stack = vec![String::new()];
        while let Some(s) = stack.pop() {
            let _ = LabelSelector::parse(&s);
            let _ = FieldSelector::parse(&s);
            if s.chars().count() < 4 {
                stack.extend(alphabet.iter().map(|c| format!("{s}{c}")));
            }
        }
    }

    #[test]
    fn equality_and_set_requirements_match_object_labels() {
        let o = obj(json!({"app": "web", "tier": "front"}));
        let m = |s: &str| sel(s).matches(|k| o.label(k));
        assert!(m("app=web"));
        assert!(m("app==web,tier=front"));
        assert!(!m("app=db"));
        assert!(m("app!=db"));
        assert!(!m("app!=web"));
        assert!(m("app in (db,web)"));
        assert!(!m("app notin (db,web)"));
        assert!(m("app notin (db)"));
        assert!(m("app") && !m("!app"));
        assert!(!m("app=web,tier=back"));
    }

    #[test]
    fn notin_and_not_equals_match_objects_without_the_label() {
        let o = obj(json!({"app": "web"}));
        let m = |s: &str| sel(s).matches(|k| o.label(k));
        assert!(m("env notin (prod)"));
        assert!(m("env!=prod"));
        assert!(m("!env"));
        assert!(!m("env in (prod)"));
        assert!(!m("env=prod"));
        assert!(!m("env="));
        assert!(!m("env"));
    }

    #[test]
    fn empty_selector_matches_everything() {
        let o = obj(json!({}));
        assert!(LabelSelector::everything().matches(|k| o.label(k)));
        assert!(LabelSelector::everything().is_empty());
        assert_eq!(LabelSelector::everything(), sel(""));
        assert_eq!(LabelSelector::everything().to_string(), "");
    }

    #[test]
    fn display_is_canonical() {
        let s = sel(" b == 1 , a notin (y, x) , !c, a in (x), d, e in (,z) ");
        assert_eq!(s.to_string(), "a in (x),a notin (x,y),b=1,!c,d,e in (,z)");
        assert_eq!(sel("a in ()").to_string(), "a in ()");
        assert_eq!(sel("a=").to_string(), "a=");
    }

    #[test]
    fn display_round_trips_through_parse() {
        for s in [
            "a=b",
            "a==b,c!=d",
            "x in (c,b,a),x notin (in),!y,z",
            "app.kubernetes.io/name=web,example.com/tier notin (,db)",
            "a=,b!=,c in ()",
            "in in (notin)",
        ] {
            let parsed = sel(s);
            let rendered = parsed.to_string();
            assert_eq!(sel(&rendered), parsed, "{s:?} rendered as {rendered:?}");
            assert_eq!(sel(&rendered).to_string(), rendered);
        }
    }

    #[test]
    fn from_api_combines_match_labels_and_match_expressions() {
        let v = json!({
            "matchLabels": {"app": "web", "example.com/tier": ""},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "staging", "prod"]},
                {"key": "canary", "operator": "NotIn", "values": ["true"]},
                {"key": "owner", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist", "values": []}
            ]
        });
        let s = LabelSelector::from_api(&v).unwrap();
        let expected = "app=web,canary notin (true),env in (prod,staging),example.com/tier=,\
                        !legacy,owner";
        assert_eq!(s, sel(expected));
        assert_eq!(s.to_string(), expected);
        let o = obj(json!({"app": "web", "example.com/tier": "", "env": "prod", "owner": "me"}));
        assert!(s.matches(|k| o.label(k)));
        assert!(LabelSelector::from_api(&json!({})).unwrap().is_empty());
        assert!(
            LabelSelector::from_api(&json!({"matchLabels": null}))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn from_api_rejects_what_kubernetes_rejects() {
        let e = |v: Value| LabelSelector::from_api(&v).unwrap_err().to_string();
        assert_eq!(
            e(json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]})),
            "invalid label selector at matchExpressions[0].values: operator In needs at least \
             one value; found none"
        );
        assert_eq!(
            e(json!({"matchExpressions": [{"key": "a", "operator": "NotIn"}]})),
            "invalid label selector at matchExpressions[0].values: operator NotIn needs at least \
             one value; found none"
        );
        assert_eq!(
            e(json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]})),
            "invalid label selector at matchExpressions[0].values: operator Exists takes no \
             values; found 1"
        );
        let op =
            e(json!({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]}));
        assert!(
            op.contains("at matchExpressions[0].operator: expected one of In, NotIn"),
            "{op}"
        );
        assert!(op.contains(r#"found "Equals""#), "{op}");
        let key = e(json!({"matchLabels": {"-bad": "x"}}));
        assert!(
            key.starts_with(r#"invalid label key "-bad" at matchLabels[-bad]"#),
            "{key}"
        );
        let val = e(json!({"matchExpressions": [
            {"key": "a", "operator": "In", "values": ["ok"]},
            {"key": "b", "operator": "In", "values": ["ok", "no way"]}
        ]}));
        assert!(
            val.contains(r#"value "no way" for label key "b" at matchExpressions[1].values[1]"#),
            "{val}"
        );
    }

    #[test]
    fn from_api_rejects_malformed_json() {
        let e = |v: Value| LabelSelector::from_api(&v).unwrap_err().to_string();
        assert_eq!(
            e(Value::Null),
            "invalid label selector at labelSelector: expected a JSON object, found null"
        );
        assert!(e(json!({"matchLabel": {"a": "b"}})).contains(r#"found field "matchLabel""#));
        assert!(
            e(json!({"matchLabels": {"a": 1}}))
                .contains("expected a string label value, found a number")
        );
        assert!(e(json!({"matchLabels": ["a"]})).contains("found an array"));
        assert!(e(json!({"matchExpressions": {}})).contains("expected an array of expressions"));
        assert!(
            e(json!({"matchExpressions": [{"operator": "Exists"}]}))
                .contains("matchExpressions[0].key")
        );
        assert!(
            e(json!({"matchExpressions": [{"key": "a", "operator": "Exists", "value": []}]}))
                .contains(r#"found field "value""#)
        );
        assert!(
            e(json!({"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]}))
                .contains("values: expected an array of strings, found a string")
        );
    }

    #[test]
    fn field_selector_parses_equality_and_inequality() {
        let s = FieldSelector::parse("spec.nodeName==n1,status.phase!=Running,metadata.name=web")
            .unwrap();
        let got: Vec<_> = s
            .requirements()
            .iter()
            .map(|r| (r.field.as_str(), r.value.as_str(), r.negated))
            .collect();
        assert_eq!(
            got,
            vec![
                ("metadata.name", "web", false),
                ("spec.nodeName", "n1", false),
                ("status.phase", "Running", true)
            ]
        );
        assert_eq!(
            s.to_string(),
            "metadata.name=web,spec.nodeName=n1,status.phase!=Running"
        );
        assert_eq!(
            FieldSelector::parse("spec.nodeName=")
                .unwrap()
                .requirements()[0]
                .value,
            ""
        );
    }

    #[test]
    fn field_selector_skips_empty_terms() {
        assert!(FieldSelector::parse("").unwrap().is_empty());
        assert!(FieldSelector::parse(",,").unwrap().is_empty());
        assert_eq!(
            FieldSelector::parse(",a=b,").unwrap(),
            FieldSelector::parse("a=b").unwrap()
        );
        assert_eq!(FieldSelector::default().to_string(), "");
    }

    #[test]
    fn field_selector_unescapes_and_reescapes_values() {
        let s = FieldSelector::parse(r"metadata.name=a\,b\=c\\d,spec.x!=\\").unwrap();
        assert_eq!(s.requirements()[0].value, r"a,b=c\d");
        assert_eq!(s.requirements()[1].value, r"\");
        assert_eq!(s.to_string(), r"metadata.name=a\,b\=c\\d,spec.x!=\\");
        assert_eq!(FieldSelector::parse(&s.to_string()).unwrap(), s);
        // Values are not label values: spaces and non-ASCII survive.
        let t = FieldSelector::parse("reason=Back off é").unwrap();
        assert_eq!(t.requirements()[0].value, "Back off é");
        assert_eq!(FieldSelector::parse(&t.to_string()).unwrap(), t);
    }

    #[test]
    fn field_selector_rejects_bad_terms_escapes_and_names() {
        assert_eq!(
            field_err(r"a=x\y"),
            r#"invalid escape "\\y" at byte 3 in a field selector value; expected \\, \, or \="#
        );
        assert!(field_err(r"a=x\").contains(r#"invalid escape "\\" at byte 3"#));
        assert_eq!(
            field_err("a=b=c"),
            r"unescaped '=' at byte 3 in a field selector value; expected it escaped as \="
        );
        assert!(field_err("a===b").contains("unescaped '=' at byte 3"));
        assert!(
            field_err("x=1,nooperator")
                .starts_with(r#"field selector term "nooperator" at byte 4 has no operator"#)
        );
        assert!(field_err("=b").contains("invalid field name \"\" at byte 0: it is empty"));
        assert!(
            field_err("a=b, c=d").contains(r#"invalid field name " c" at byte 4: it contains ' '"#)
        );
        assert!(field_err(r"a\=b=c").contains("contains '\\\\'"));
        for s in ["(", "a in (", "a in ()", "!", "\\", ",=", &"k".repeat(300)] {
            assert!(FieldSelector::parse(s).is_err(), "{s:?}");
        }
    }

    #[test]
    fn field_selector_display_is_sorted_and_canonical() {
        let s = FieldSelector::parse("b==2,a!=1,a=1,b=2").unwrap();
        assert_eq!(s.to_string(), "a=1,a!=1,b=2");
        assert_eq!(s, FieldSelector::parse("a!=1,b=2,a==1").unwrap());
    }
}
