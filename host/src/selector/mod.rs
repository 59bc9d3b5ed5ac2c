//! Label and field selectors: parsed once, matched against cached objects, rendered for API queries.

mod error;
mod field;
mod label;
mod parse;
mod requirement;
mod validate;

pub use error::{Error, Result};
pub use field::{FieldRequirement, FieldSelector};
pub use label::LabelSelector;
pub use requirement::{Operator, Requirement};

#[cfg(test)]
mod tests {
    use super::field::*;
    use super::*;
    use crate::object::{Object, Transform};
    use serde_json::Value;
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
