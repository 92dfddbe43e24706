use super::*;

fn ex(spec: &str) -> Extract {
    Extract::parse(spec).unwrap_or_else(|e| unreachable!("{spec}: {e}"))
}

#[test]
fn text_is_normalised() {
    let t = ex("text");
    assert_eq!(
        t.answer("  The   Eiffel\n Tower.  ").as_deref(),
        Some("the eiffel tower")
    );
    assert_eq!(t.answer("**Paris**!").as_deref(), Some("paris"));
    assert_eq!(t.answer("`\"Yes\"`?").as_deref(), Some("yes"));
    assert_eq!(t.answer("Über-fine").as_deref(), Some("über-fine"));
    assert_eq!(t.answer("  \n "), None);
    assert_eq!(t.answer("..."), None);
}

#[test]
fn the_last_number_in_its_canonical_form() {
    let n = ex("number");
    let a = |s: &str| n.answer(s);
    assert_eq!(
        a("3 apples and 4 pears make 7 fruit.").as_deref(),
        Some("7")
    );
    assert_eq!(a("It costs $1,234.50 in all").as_deref(), Some("1234.5"));
    assert_eq!(a("1,000,000").as_deref(), Some("1000000"));
    // Not thousands groups: three numbers.
    assert_eq!(a("1,2,3").as_deref(), Some("3"));
    assert_eq!(a("12,34").as_deref(), Some("34"));
    assert_eq!(a("1234,567").as_deref(), Some("567"));
    assert_eq!(a("the answer is 007.500").as_deref(), Some("7.5"));
    assert_eq!(a("0.0").as_deref(), Some("0"));
    assert_eq!(a("-0.00").as_deref(), Some("0"));
    assert_eq!(a("it fell to -12 degrees").as_deref(), Some("-12"));
    assert_eq!(a("pages 3-5").as_deref(), Some("5"));
    assert_eq!(a("(-4)").as_deref(), Some("-4"));
    // A full stop after a number is not a decimal point.
    assert_eq!(a("Version 2.").as_deref(), Some("2"));
    assert_eq!(a("no digits here"), None);
    // Digits of other scripts are not read as numbers.
    assert_eq!(a("٣"), None);
    // Leading points, exponents and a Unicode minus.
    assert_eq!(a("about .5 of it").as_deref(), Some("0.5"));
    assert_eq!(a("3.5e2").as_deref(), Some("350"));
    assert_eq!(a("x = 1e-3").as_deref(), Some("0.001"));
    assert_eq!(a("it is −7").as_deref(), Some("-7"));
    assert_eq!(a("1.5E+40").as_deref(), Some("1.5e40"));
    assert_eq!(a("2e-40").as_deref(), Some("2e-40"));
    assert_eq!(
        a("1e99999999999999999999999").as_deref(),
        Some("1e1099511627776")
    );
    // One value, one vote.
    for same in ["42", "42.0", "4.2e1", "420e-1", "0042.00"] {
        assert_eq!(a(same).as_deref(), Some("42"), "{same}");
    }
}

#[test]
fn only_the_tail_is_read_and_the_last_answer_found() {
    // More than MAX_JSON_TRIES brackets before the final JSON.
    let noise = "[x] {y} ".repeat(MAX_JSON_TRIES * 2);
    let text = format!("{{\"answer\": 1}} {noise} final: {{\"answer\": 2}}");
    assert_eq!(ex("json:/answer").answer(&text).as_deref(), Some("2"));
    // A number, JSON and a match past the tail are not read; the answer
    // at the end is, however long the text before it.
    let long = format!("{{\"answer\": 9}} 9 final: nine\n{}", "é".repeat(MAX_TAIL));
    assert_eq!(ex("json:/answer").answer(&long), None);
    assert_eq!(ex("number").answer(&long), None);
    assert_eq!(ex("regex:final: (\\w+)").answer(&long), None);
    assert_eq!(ex("after:final:").answer(&long), None);
    let ends = format!("{long} the answer is 12, final: ten {{\"answer\": 3}}");
    assert_eq!(ex("json:/answer").answer(&ends).as_deref(), Some("3"));
    assert_eq!(ex("number").answer(&ends).as_deref(), Some("3"));
    assert_eq!(
        ex("regex:final: (\\w+)").answer(&ends).as_deref(),
        Some("ten")
    );
    // The whole last value for an empty path, not its last part.
    assert_eq!(
        ex("json:")
            .answer(r#"{"a": 1} then {"b": [1, {"c": 2}]}"#)
            .as_deref(),
        Some(r#"{"b":[1,{"c":2}]}"#)
    );
}

#[test]
fn json_values_at_a_pointer_or_a_dotted_path() {
    let j = ex("json:/answer");
    assert_eq!(j.answer(r#"{"answer": 42}"#).as_deref(), Some("42"));
    assert_eq!(
        j.answer(
            "Thinking... {\"answer\": \"Paris\"} then ```json\n{\"answer\": \" PARIS. \"}\n```"
        )
        .as_deref(),
        Some("paris")
    );
    // The last object that has the path wins, not the last object.
    assert_eq!(
        j.answer(r#"{"answer": 4.0} and {"note": 1}"#).as_deref(),
        Some("4")
    );
    assert_eq!(j.answer(r#"{"other": 1}"#), None);
    assert_eq!(j.answer("not json {oops"), None);
    let d = ex("json:result.items.1");
    assert_eq!(
        d.answer(r#"{"result": {"items": ["a", {"b": 2, "a": [true, null]}]}}"#)
            .as_deref(),
        Some(r#"{"a":[true,null],"b":2}"#)
    );
    let whole = ex("json:");
    assert_eq!(whole.answer(r#"[1, 2]"#), whole.answer("Here: [1,2]"));
    assert_eq!(
        ex("json:/n").answer(r#"{"n": 1e20}"#).as_deref(),
        Some("100000000000000000000")
    );
    assert_eq!(ex("json:/n").answer(r#"{"n": -3}"#).as_deref(), Some("-3"));
    assert_eq!(
        ex("json:/ok").answer(r#"{"ok": false}"#).as_deref(),
        Some("false")
    );
}

#[test]
fn after_a_marker_the_rest_of_its_last_line() {
    let a = ex("after:answer:");
    assert_eq!(
        a.answer("Answer: 3\nWait, no.\nFinal ANSWER:  **Seven**.\nThanks!")
            .as_deref(),
        Some("seven")
    );
    assert_eq!(
        a.answer("The answer:\n\n  12 dogs \nmore text").as_deref(),
        Some("12 dogs")
    );
    assert_eq!(a.answer("**Answer:** Paris").as_deref(), Some("paris"));
    assert_eq!(a.answer("no marker here"), None);
    assert_eq!(a.answer("answer:   "), None);
    assert_eq!(a.answer("ans"), None);
    // Multi-byte text before and after the marker.
    assert_eq!(ex("after:→").answer("é → ünï → ok").as_deref(), Some("ok"));
}

#[test]
fn a_regex_gives_its_last_match_first_group_else_the_match() {
    let r = ex("regex:(?i)final: (\\w+)");
    assert_eq!(
        r.answer("draft: x\nFINAL: Blue\nfinal: red").as_deref(),
        Some("red")
    );
    assert_eq!(r.answer("nothing final"), None);
    let whole = ex("regex:[A-D]\\)");
    assert_eq!(whole.answer("I pick C) because").as_deref(), Some("c)"));
    // An optional group that did not take part: the whole match.
    let opt = ex("regex:x(y)?");
    assert_eq!(opt.answer("xz").as_deref(), Some("x"));
}

#[test]
fn bad_extractors_are_refused_with_what_is_accepted() {
    for (spec, says) in [
        ("numbers", "unknown extractor \"numbers\""),
        ("after:", "needs a marker"),
        ("after:  ", "needs a marker"),
        ("regex:", "needs a pattern"),
        ("regex:(unclosed", "does not compile"),
    ] {
        let e = Extract::parse(spec).err().unwrap_or_default();
        assert!(e.contains(says), "{spec}: {e}");
    }
    let long = format!("regex:{}", "a".repeat(MAX_PATTERN + 1));
    assert!(Extract::parse(&long).is_err());
    // A pattern that compiles too big is refused, not built.
    let big = Extract::parse("regex:(\\w{100}){100}")
        .err()
        .unwrap_or_default();
    assert!(big.contains("does not compile"), "{big}");
}
