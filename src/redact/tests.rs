use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use proptest::prelude::*;

use super::*;

const KEY: &str = "sk-conclave-SECRET-0123456789abcdef";

/// Another key, 18 characters: its runs count from 12.
const OTHER: &str = "other-key-4b7c9d2e";

fn r() -> Redactor {
    Redactor::new([KEY, OTHER])
}

/// Whether `text` still holds a run of `key` that counts (any case, line
/// breaks and indentation taken out), or 8 characters in a row of its
/// base64 forms.
fn leaks(text: &str, key: &str) -> bool {
    leaks_run(text, key, patterns::min_run(key.len()))
}

/// Whether `text` still holds `w` characters in a row of `key`, or 8 of
/// its base64 forms (as [`leaks`]).
fn leaks_run(text: &str, key: &str, w: usize) -> bool {
    let flat: String = text
        .replace("\\n", "\n")
        .replace("\\r", "\r")
        .lines()
        .map(|l| l.trim_start_matches([' ', '\t']).trim_end_matches('\r'))
        .collect();
    let lower = flat.to_ascii_lowercase();
    let key_l = key.to_ascii_lowercase();
    let plain = (0..=key.len() - w).any(|i| lower.contains(&key_l[i..i + w]));
    let b64 = (0..3).any(|skip| {
        let rest = &key.as_bytes()[skip..];
        let enc = STANDARD.encode(&rest[..rest.len() / 3 * 3]);
        let enc = enc.trim_end_matches('=');
        (0..=enc.len() - 8).any(|i| flat.contains(&enc[i..i + 8]))
    });
    plain || b64
}

#[test]
fn keys_and_any_run_of_them_are_removed() {
    let r = r();
    assert_eq!(
        r.redact("Authorization: Bearer sk-conclave-SECRET-0123456789abcdef was wrong"),
        "Authorization: Bearer [REDACTED] was wrong"
    );
    // Two-thirds of the key (24 of 35 characters) is the key; less is not.
    assert_eq!(
        r.redact("key sk-conclave-SECRET-01234… cut"),
        "key [REDACTED]… cut"
    );
    let less = "key sk-conclave-SECRET-0123… cut";
    assert!(matches!(r.redact(less), Cow::Borrowed(t) if t == less));
    // Given up, a string without a secret comes back as it is.
    let kept = String::from(less);
    let at = kept.as_ptr();
    let back = r.clean_owned(kept);
    assert_eq!(back.as_ptr(), at);
    assert_eq!(r.clean_owned(format!("it was {KEY}")), "it was [REDACTED]");
    assert_eq!(
        r.redact("suffix …e-SECRET-0123456789abcdef!"),
        "suffix …[REDACTED]!"
    );
    assert_eq!(
        r.redact("middle (clave-SECRET-0123456789a)"),
        "middle ([REDACTED])"
    );
    assert_eq!(
        r.redact("SK-CONCLAVE-SECRET-0123456789ABCDEF upper"),
        "[REDACTED] upper"
    );
    assert_eq!(
        r.redact("sk-conclave-SECRET-0123456789abcdef and other-key-4b7c9d2e"),
        "[REDACTED] and [REDACTED]"
    );
    // A short key's runs count from 12 characters.
    assert_eq!(
        r.redact("other-key-4b is 12, ther-key-4b is 11"),
        "[REDACTED] is 12, ther-key-4b is 11"
    );
    assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
}

#[test]
fn base64_forms_are_removed() {
    let r = r();
    for text in [
        format!("Bearer {KEY}"),
        KEY.to_owned(),
        format!("user:{KEY}"),
        format!("ab:{KEY}"),
    ] {
        for enc in [STANDARD.encode(&text), URL_SAFE_NO_PAD.encode(&text)] {
            let out = r.clean(format!("header: {enc} end"));
            assert!(!leaks(&out, KEY), "{text}: {out}");
            assert!(
                out.starts_with("header: ") && out.ends_with(" end"),
                "{out}"
            );
        }
    }
    let enc = STANDARD.encode(format!("Bearer {KEY}"));
    assert_eq!(
        r.clean(format!("Basic {enc}.")),
        "Basic QmVhcmVyI[REDACTED]."
    );
}

#[test]
fn runs_wrapped_over_lines_are_removed() {
    let r = r();
    let wrapped = "key: sk-con\nclave-\r\n   SECRET\n\t-01234\n56789a\nbcdef done";
    assert_eq!(r.redact(wrapped), "key: [REDACTED] done");
    // As a JSON body carries it: escaped breaks.
    let json = r#"{"content":"key: sk-con\nclave-\r\n  SECRET-0123456789abcdef\n"}"#;
    assert_eq!(r.redact(json), r#"{"content":"key: [REDACTED]\n"}"#);
    // An escaped backslash before an `n` is not a line break.
    assert_eq!(r.redact(r"C:\\new sk-co"), r"C:\\new sk-co");
}

#[test]
fn generic_prefixes_alone_are_not_secret() {
    let r = Redactor::new(["sk-proj-AbCdEfGhIjKlMnOpQrSt"]);
    let innocent = "OpenAI keys look like sk-proj-... or sk-proj-XYZ; sk-proj-A is short";
    assert_eq!(r.redact(innocent), innocent);
    // 19 of 28 characters: two-thirds.
    assert_eq!(r.redact("leak sk-proj-AbCdEfGhIjK!"), "leak [REDACTED]!");
    assert_eq!(r.redact("leak roj-AbCdEfGhIjKlMnOp!"), "leak [REDACTED]!");
    let enc = STANDARD.encode("sk-proj-xyz and more");
    assert_eq!(r.clean(&enc), enc);
    // A key that is nearly all prefix is not looked for at all.
    let r = Redactor::new(["sk-proj-abc4De"]);
    assert!(!r.is_active());
    assert_eq!(r.redact("sk-proj-abc4De"), "sk-proj-abc4De");
}

#[test]
fn plain_secrets_are_never_looked_for() {
    for (key, why) in [
        ("EMPTY", Plain::Short),
        ("ollama", Plain::Short),
        ("lm-studio", Plain::Short),
        ("sk-no-key-required", Plain::OneKind),
        ("sk-493028157720", Plain::OneKind),
        ("sk-ant-api03-Ab3", Plain::Short),
        ("my-local-gateway-key", Plain::OneKind),
        ("CORRECT-HORSE-BATTERY-STAPLE", Plain::OneKind),
    ] {
        assert_eq!(plain(key), Some(why), "{key}");
    }
    for key in [
        KEY,
        OTHER,
        "sk-acceptance-required-testing-upstream-4f9c2e81",
        "Correct-Horse-Battery-Staple",
    ] {
        assert_eq!(plain(key), None, "{key}");
    }
    let r = Redactor::new(["EMPTY", "ollama", "lm-studio", "sk-no-key-required", ""]);
    assert!(!r.is_active(), "{r:?}");
    let text = "EMPTY ollama lm-studio: sk-no-key-required is required";
    assert!(matches!(r.redact(text), Cow::Borrowed(t) if t == text));
    // Beside a real key, they are still not looked for.
    let r = Redactor::new(["sk-no-key-required", KEY]);
    assert_eq!(r.redact("sk-no-key-required"), "sk-no-key-required");
    assert_eq!(r.redact(KEY), REDACTED);
}

#[test]
fn bytes_stay_valid_json_and_utf8() {
    let r = Redactor::new(["sécret-clé-0123456789"]);
    let body = Bytes::from(r#"{"a":"x sécret-clé-0123456789 é","b":"ret-clé-0123456789"}"#);
    let out = r.redact_bytes(body);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(v["a"], "x [REDACTED] é");
    assert_eq!(v["b"], "[REDACTED]");
    let none = Bytes::from_static(b"{\"a\":1}");
    assert_eq!(r.redact_bytes(none.clone()).as_ptr(), none.as_ptr());
}

fn content_event(text: &str) -> Bytes {
    let v = serde_json::json!({"id": "c", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]});
    Bytes::from(v.to_string())
}

/// One event through the redactor, with the text the relay reads of it.
fn relay_one(r: &Redactor, carry: &mut Carry, data: Bytes) -> Bytes {
    let text = crate::wire::inspect_chunk_text(&data, false)
        .ok()
        .and_then(|i| i.text);
    r.event(carry, data, text.as_deref())
}

/// The content a client puts together from the events.
fn relay(r: &Redactor, pieces: &[&str]) -> String {
    let mut carry = Carry::default();
    let mut out = String::new();
    for p in pieces {
        let ev = relay_one(r, &mut carry, content_event(p));
        let v: serde_json::Value =
            serde_json::from_slice(&ev).unwrap_or_else(|e| unreachable!("{e}"));
        out.push_str(
            v["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap_or_default(),
        );
    }
    out
}

#[test]
fn a_secret_streamed_in_pieces_is_cut_as_it_goes() {
    let r = r();
    let pieces: Vec<&str> = [
        "here: ", "sk-", "con", "cla", "ve-", "SEC", "RET", "-01", "234", "567", "89a", "bcd",
        "ef", " ok",
    ]
    .to_vec();
    let out = relay(&r, &pieces);
    // The run counts at its 24th character (two-thirds of the key): the
    // event that brings it and all the key's events after it are cut.
    assert_eq!(
        out,
        format!("here: sk-conclave-SECRET-01{} ok", REDACTED.repeat(5))
    );
    assert!(!leaks(&out, KEY), "{out}");
    // Events without text (a role chunk, a finish chunk) do not reset it.
    let mut carry = Carry::default();
    let _ = relay_one(&r, &mut carry, content_event("sk-conclave-SECRET-0123"));
    let _ = relay_one(
        &r,
        &mut carry,
        Bytes::from(r#"{"choices":[{"delta":{"role":"assistant"}}]}"#),
    );
    let ev = relay_one(&r, &mut carry, content_event("4567"));
    assert!(!String::from_utf8_lossy(&ev).contains("4567"), "{ev:?}");
    // Tool-call arguments are text too.
    let mut carry = Carry::default();
    let args = |a: &str| {
        Bytes::from(serde_json::json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": a}}]}}]}).to_string())
    };
    let _ = relay_one(&r, &mut carry, args("{\"k\":\"sk-conclave-SECRET-01"));
    let ev = relay_one(&r, &mut carry, args("23456\"}"));
    assert!(
        String::from_utf8_lossy(&ev).contains(r#""arguments":"[REDACTED]\"}""#),
        "{ev:?}"
    );
}

#[test]
fn innocent_streams_pass_untouched() {
    let r = r();
    let mut carry = Carry::default();
    for p in ["The ", "quick ", "sk-", "brown ", "fox"] {
        let ev = content_event(p);
        assert_eq!(relay_one(&r, &mut carry, ev.clone()), ev);
    }
}

/// A key made of dictionary words, as a test or a local setup may have.
const WORDS: &str = "sk-acceptance-required-testing-upstream-4f9c2e81";

#[test]
fn words_of_a_key_in_answers_are_left_alone() {
    let r = Redactor::new([WORDS]);
    assert!(r.is_active());
    for text in [
        "hello from the acceptance test",
        "the vendor field says fake-upstream",
        "a key is required; testing upstream servers is required",
        "Acceptance-Required-Testing: 27 characters of it",
        "sk-acceptance-required-testing-: 31",
        r#"{"choices":[{"message":{"content":"acceptance\nrequired testing"}}]}"#,
    ] {
        assert!(
            matches!(r.redact(text), Cow::Borrowed(t) if t == text),
            "{text}"
        );
        let body = Bytes::from(text.to_owned());
        assert_eq!(r.redact_bytes(body.clone()), body);
    }
    let mut carry = Carry::default();
    for p in [
        "hello from the ",
        "accept",
        "ance",
        " test: ",
        "sk-",
        "acceptance-",
        "required",
        "-testing",
        " done",
    ] {
        let ev = content_event(p);
        assert_eq!(relay_one(&r, &mut carry, ev.clone()), ev, "{p}");
    }
}

#[test]
fn a_key_of_words_and_its_encodings_are_still_removed() {
    let r = Redactor::new([WORDS]);
    let b64 = |s: &str| [STANDARD.encode(s), URL_SAFE_NO_PAD.encode(s)];
    // Beside other text, base64 keeps the groups that are not the key's.
    for s in [format!("user:{WORDS}"), format!("Bearer {WORDS}")] {
        for enc in b64(&s) {
            let out = r.clean(format!("key {enc} end"));
            assert!(!leaks_run(&out, WORDS, 8), "{enc}: {out}");
            assert!(
                out.starts_with("key ") && out.ends_with(&format!("{REDACTED} end")),
                "{out}"
            );
        }
    }
    let mut forms: Vec<String> = vec![WORDS.to_owned(), WORDS.to_ascii_uppercase()];
    forms.extend(b64(WORDS));
    // URL-encoded: its punctuation, or every byte.
    forms.push(WORDS.replace('-', "%2D"));
    forms.push(WORDS.bytes().map(|b| format!("%{b:02x}")).collect());
    // JSON-escaped: every character as `\u`, or some.
    forms.push(
        WORDS
            .chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect(),
    );
    forms.push(WORDS.replace('e', "\\u0065"));
    // Two-thirds of it (32 of 48 characters), from either end.
    forms.push(WORDS[..32].to_owned());
    forms.push(WORDS[16..].to_owned());
    for f in &forms {
        let out = r.clean(format!("key {f} end"));
        assert_eq!(out, "key [REDACTED] end", "{f}");
        // Inside a JSON string, the body stays valid JSON.
        let body = Bytes::from(format!(r#"{{"error":{{"message":"got {f}."}}}}"#));
        let out = r.redact_bytes(body);
        let v: serde_json::Value =
            serde_json::from_slice(&out).unwrap_or_else(|e| unreachable!("{e}: {out:?}"));
        assert_eq!(v["error"]["message"], "got [REDACTED].", "{f}");
    }
    // One less than two-thirds is text.
    let text = format!("key {} end", &WORDS[..31]);
    assert_eq!(r.clean(&text), text);
    // Wrapped over lines.
    let wrapped = format!("key {}\n  {} end", &WORDS[..20], &WORDS[20..]);
    assert_eq!(r.clean(wrapped), "key [REDACTED] end");
}

#[test]
fn a_key_of_words_split_over_two_events_is_cut() {
    let r = Redactor::new([WORDS]);
    // Cut early: the first event says less than two-thirds of it, the
    // second says the rest, which never goes out.
    let (a, b) = (
        format!("key: {}", &WORDS[..16]),
        format!("{} done", &WORDS[16..]),
    );
    let out = relay(&r, &[&a, &b]);
    assert_eq!(out, format!("key: {}{REDACTED} done", &WORDS[..16]));
    // Cut late: both events are cut.
    let (a, b) = (
        format!("key: {}", &WORDS[..40]),
        format!("{} done", &WORDS[40..]),
    );
    let out = relay(&r, &[&a, &b]);
    assert_eq!(out, format!("key: {REDACTED}{REDACTED} done"));
    // A Messages stream's text deltas and a Responses stream's are cut alike.
    let events: [fn(&str) -> serde_json::Value; 2] = [
        |t| serde_json::json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}),
        |t| serde_json::json!({"type": "response.output_text.delta", "delta": t}),
    ];
    for event in events {
        let mut carry = Carry::default();
        let mut out = String::new();
        for piece in [&WORDS[..20], &WORDS[20..], " done"] {
            let data = Bytes::from(event(piece).to_string());
            let ev = r.event(&mut carry, data, Some(piece));
            let v: serde_json::Value =
                serde_json::from_slice(&ev).unwrap_or_else(|e| unreachable!("{e}"));
            let d = &v["delta"];
            out.push_str(d.as_str().or(d["text"].as_str()).unwrap_or_default());
        }
        assert_eq!(out, format!("{}{REDACTED} done", &WORDS[..20]));
    }
}

#[test]
fn escaped_keys_are_removed_and_the_escapes_around_them_kept() {
    let r = r();
    let escaped: String = KEY
        .chars()
        .map(|c| format!("\\u{:04X}", c as u32))
        .collect();
    let body = format!(r#"{{"type":"{escaped}","a":"\u00e9\/x %41 \\u0073"}}"#);
    let out = r.redact_bytes(Bytes::from(body.clone()));
    let want = body.replace(&escaped, REDACTED);
    assert_eq!(String::from_utf8_lossy(&out), want);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(v["type"], REDACTED);
    // The key escaped in part, after an escaped line break.
    let body = format!(
        "x\\n{}{}",
        &KEY[..10].replace('-', "\\u002d"),
        &KEY[10..].replace('-', "%2d")
    );
    assert_eq!(r.clean(&body), format!("x\\n{REDACTED}"));
}

proptest! {
    #[test]
    fn any_window_in_any_case_or_wrapping_is_removed(
        start in 0usize..12,
        len in 24usize..36,
        upper in any::<bool>(),
        wrap_at in proptest::option::of(1usize..7),
        before in "[xyz ]{0,12}",
        after in "[ .,;!]{0,6}",
    ) {
        let end = (start + len).min(KEY.len());
        prop_assume!(end - start >= patterns::min_run(KEY.len()));
        let mut piece = KEY[start..end].to_owned();
        if upper {
            piece = piece.to_ascii_uppercase();
        }
        if let Some(w) = wrap_at {
            let chars: Vec<char> = piece.chars().collect();
            piece = chars.chunks(w).map(|c| c.iter().collect::<String>()).collect::<Vec<_>>().join("\n  ");
        }
        let text = format!("{before}{piece}{after}");
        let out = r().clean(&text);
        prop_assert!(!leaks(&out, KEY), "{} -> {}", text, out);
        prop_assert!(out.starts_with(before.as_str()) && out.ends_with(after.as_str()), "{} -> {}", text, out);
    }

    #[test]
    fn base64_at_any_alignment_is_removed(pad in "[a-zA-Z:]{0,5}", url in any::<bool>()) {
        let text = format!("{pad}{KEY}");
        let enc = if url { URL_SAFE_NO_PAD.encode(&text) } else { STANDARD.encode(&text) };
        let out = r().clean(format!("x {enc} y"));
        prop_assert!(!leaks(&out, KEY), "{}", out);
    }

    #[test]
    fn words_of_a_key_in_any_order_are_untouched(
        words in proptest::collection::vec(
            proptest::sample::select(vec!["sk", "acceptance", "required", "testing", "upstream", "4f9c2e81", "the", "is"]),
            0..24,
        ),
        seps in proptest::collection::vec(proptest::sample::select(vec![" ", "-", "-", ", ", "\n"]), 24),
        upper in any::<bool>(),
    ) {
        let mut text: String = words.iter().zip(&seps).map(|(w, s)| format!("{w}{s}")).collect();
        if upper {
            text = text.to_ascii_uppercase();
        }
        prop_assume!(!leaks(&text, WORDS));
        let r = Redactor::new([WORDS]);
        prop_assert_eq!(r.redact(&text), text.as_str());
    }

    #[test]
    fn innocent_text_is_untouched(text in "[a-zA-Z0-9 .,\n-]{0,200}") {
        prop_assume!(!leaks(&text, KEY));
        let r = r();
        prop_assert_eq!(r.redact(&text), text.as_str());
    }

    #[test]
    fn streamed_pieces_never_add_up_to_a_counting_run(cuts in proptest::collection::vec(1usize..6, 1..40)) {
        let text = format!("say {KEY} now");
        let mut pieces = Vec::new();
        let mut at = 0;
        for c in cuts.iter().cycle() {
            if at >= text.len() {
                break;
            }
            let end = (at + c).min(text.len());
            pieces.push(&text[at..end]);
            at = end;
        }
        let out = relay(&r(), &pieces);
        prop_assert!(!leaks(&out, KEY), "{:?} -> {}", pieces, out);
    }
}
