use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use proptest::prelude::*;

use super::*;

const KEY: &str = "sk-conclave-SECRET-0123456789abcdef";

fn r() -> Redactor {
    Redactor::new([KEY, "other-key-abcdef"]).unwrap_or_else(|e| unreachable!("{e}"))
}

/// Whether `text` still holds 8 characters in a row of `key` (any case,
/// line breaks and indentation taken out), or of its base64 forms.
fn leaks(text: &str, key: &str) -> bool {
    let flat: String = text
        .replace("\\n", "\n")
        .replace("\\r", "\r")
        .lines()
        .map(|l| l.trim_start_matches([' ', '\t']).trim_end_matches('\r'))
        .collect();
    let lower = flat.to_ascii_lowercase();
    let key_l = key.to_ascii_lowercase();
    let plain = (0..=key.len() - 8).any(|i| lower.contains(&key_l[i..i + 8]));
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
    assert_eq!(r.redact("key sk-concla… cut"), "key [REDACTED]… cut");
    assert_eq!(
        r.redact("suffix …SECRET-0123456789abcdef!"),
        "suffix …[REDACTED]!"
    );
    assert_eq!(r.redact("middle (ECRET-012)"), "middle ([REDACTED])");
    assert_eq!(
        r.redact("SK-CONCLAVE-SECRET-0123456789ABCDEF upper"),
        "[REDACTED] upper"
    );
    assert_eq!(
        r.redact("sk-conclave-SECRET-0123456789abcdefsk-conclave-SEC and other-key-abcdef"),
        "[REDACTED] and [REDACTED]"
    );
    assert_eq!(
        r.redact("sk-concl is 8, sk-conc is 7"),
        "[REDACTED] is 8, sk-conc is 7"
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
    let r = Redactor::new(["sk-proj-AbCdEfGhIjKlMnOpQrSt"]).unwrap_or_else(|e| unreachable!("{e}"));
    let innocent = "OpenAI keys look like sk-proj-... or sk-proj-XYZ; sk-proj-A is short";
    assert_eq!(r.redact(innocent), innocent);
    assert_eq!(r.redact("leak sk-proj-AbCd!"), "leak [REDACTED]!");
    assert_eq!(r.redact("leak roj-AbCd!"), "leak [REDACTED]!");
    let enc = STANDARD.encode("sk-proj-xyz and more");
    assert_eq!(r.clean(&enc), enc);
    // A key that is nearly all prefix is matched whole.
    let r = Redactor::new(["sk-proj-abc"]).unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(r.redact("sk-proj-ab sk-proj-abc"), "sk-proj-ab [REDACTED]");
}

#[test]
fn short_secrets_are_matched_whole_and_not_inside_words() {
    let r = Redactor::new(["k-team"]).unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(
        r.redact("Bearer k-team; work-team, K-TEAM"),
        "Bearer [REDACTED]; work-team, [REDACTED]"
    );
}

#[test]
fn bytes_stay_valid_json_and_utf8() {
    let r = Redactor::new(["sécret-clé-0123456789"]).unwrap_or_else(|e| unreachable!("{e}"));
    let body = Bytes::from(r#"{"a":"x sécret-clé-0123456789 é","b":"ret-clé-01"}"#);
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
    assert!(!leaks(&out, KEY), "{out}");
    assert!(
        out.starts_with("here: sk-con") && out.ends_with(" ok"),
        "{out}"
    );
    // Events without text (a role chunk, a finish chunk) do not reset it.
    let mut carry = Carry::default();
    let _ = relay_one(&r, &mut carry, content_event("sk-conc"));
    let _ = relay_one(
        &r,
        &mut carry,
        Bytes::from(r#"{"choices":[{"delta":{"role":"assistant"}}]}"#),
    );
    let ev = relay_one(&r, &mut carry, content_event("lave"));
    assert!(!String::from_utf8_lossy(&ev).contains("lave"), "{ev:?}");
    // Tool-call arguments are text too.
    let mut carry = Carry::default();
    let args = |a: &str| {
        Bytes::from(serde_json::json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": a}}]}}]}).to_string())
    };
    let _ = relay_one(&r, &mut carry, args("{\"k\":\"sk-conc"));
    let ev = relay_one(&r, &mut carry, args("lave-S\"}"));
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

proptest! {
    #[test]
    fn any_window_in_any_case_or_wrapping_is_removed(
        start in 0usize..28,
        len in 8usize..36,
        upper in any::<bool>(),
        wrap_at in proptest::option::of(1usize..7),
        before in "[xyz ]{0,12}",
        after in "[ .,;!]{0,6}",
    ) {
        let end = (start + len).min(KEY.len());
        prop_assume!(end - start >= 8);
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
    fn innocent_text_is_untouched(text in "[a-zA-Z0-9 .,\n-]{0,200}") {
        prop_assume!(!leaks(&text, KEY));
        let r = r();
        prop_assert_eq!(r.redact(&text), text.as_str());
    }

    #[test]
    fn streamed_pieces_never_add_up_to_8(cuts in proptest::collection::vec(1usize..6, 1..40)) {
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
