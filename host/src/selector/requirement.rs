//! One requirement of a label selector: a key, an operator and values.

use std::fmt;

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
    pub(super) fn rank(self) -> u8 {
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

/// One requirement of a [`LabelSelector`](super::LabelSelector): a key, an operator and values.
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
    pub(super) fn new(key: &str, operator: Operator, mut values: Vec<String>) -> Self {
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
