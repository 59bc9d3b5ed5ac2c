//! Label selectors: the string syntax and the API's structured form, parsed into one canonical
//! value.

use std::fmt;

use serde_json::Value;

use super::error::{Error, Result, shape, snippet};
use super::parse::{Parser, Tok, unexpected};
use super::requirement::{Operator, Requirement};
use super::validate::{check_key, check_value};

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
        self.requirements.iter().all(|r| r.matches(label(r.key())))
    }

    fn from_requirements(mut requirements: Vec<Requirement>) -> Self {
        requirements.sort_by(|a, b| {
            a.key()
                .cmp(b.key())
                .then(a.operator().rank().cmp(&b.operator().rank()))
                .then_with(|| a.values().cmp(b.values()))
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
