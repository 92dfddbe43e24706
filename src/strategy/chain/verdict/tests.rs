use super::*;

#[test]
fn the_example_with_small_edits_is_a_copy_unless_the_conversation_is_its_subject() {
    let example = "The reply gives the tower's year of opening, 1889, but the question \
                       asked for its height: it is 330 metres.";
    let conversation = ["[user] What is the capital of France?\nCandidate: Lyon."];
    // Copies seen from a small verifier: the example with a word or
    // a number changed, or its end swapped for the real subject.
    for copy in [
        "The reply gives the tower's year of opening, 1889, but the question asked for its height: 307 metres.",
        "The reply gives the tower's year of opening, 1889, but the question asked for the capital.",
        "the reply gives the year of opening 1889 but it is 330 metres",
        "Reply gives tower's opening year 1889; height is 330 metres.",
        "The reply gives the tower's year of opening, 1889, but the question asked when it was built: in 1887.",
    ] {
        assert!(copies_example(copy, example, &conversation), "{copy}");
    }
    // Too changed to count as repeating the prompt: only this check
    // catches it.
    assert!(!echoes(
        "The reply gives the tower's year of opening, 1889, but the question asked when it was built: in 1887.",
        &[example]
    ));
    // The verifier's own words, even in the example's manner.
    for own in [
        "The reply gives Lyon, but the capital of France is Paris.",
        "The reply gives the year, but the question asked for the capital.",
        "Wrong city: the capital is Paris.",
        "",
    ] {
        assert!(!copies_example(own, example, &conversation), "{own}");
    }
    // On a question about the tower itself, the words are the
    // conversation's, and the feedback is the verifier's own.
    let tower = [
        "[user] Give the Eiffel tower's year of opening and its height in metres.\nCandidate: Its year of opening is 1889.",
    ];
    assert!(!copies_example(
        "The reply gives the year of opening, 1889, but not the height: it is 330 metres.",
        example,
        &tower
    ));
}

fn read(text: &str) -> Option<(bool, Option<String>)> {
    parse(text).map(|r| (r.accept, r.feedback))
}

#[test]
fn verdicts_are_read_leniently() {
    assert_eq!(
        read(r#"{"accept": true, "feedback": ""}"#),
        Some((true, None))
    );
    assert_eq!(
        read("Sure! ```json\n{\"accept\": false, \"feedback\": \"too short\"}\n```"),
        Some((false, Some("too short".into())))
    );
    assert_eq!(read(r#"{"accept": "no"}"#), Some((false, None)));
    assert_eq!(read(r#"{"Accept": true}"#), Some((true, None)));
    assert_eq!(
        read(r#"{"APPROVED": "Yes", "Reason": "fine"}"#),
        Some((true, Some("fine".into())))
    );
    assert_eq!(read(r#"{"verdict": "reject"}"#), Some((false, None)));
    assert_eq!(read(r#"{"accepted": 0}"#), Some((false, None)));
    assert_eq!(read("looks good to me"), None);
    assert_eq!(read(r#"{"verdict": "fine"}"#), None);
    assert_eq!(read(r#"{"score": 9}"#), None);
    assert_eq!(read("{not json}"), None);
}

#[test]
fn every_key_small_models_use() {
    for (text, want) in [
        (r#"{"acceptance": false, "feedback": "x y"}"#, false),
        (r#"{"acceptance": true}"#, true),
        (r#"{"is_correct": true}"#, true),
        (r#"{"isCorrect": "false"}"#, false),
        (r#"{"correct": "Incorrect."}"#, false),
        (r#"{"valid": 1}"#, true),
        (r#"{"passed": "PASS"}"#, true),
        (r#"{"pass": false}"#, false),
        (r#"{"ok": true}"#, true),
        (r#"{"decision": "Accept."}"#, true),
        (r#"{"result": "fail"}"#, false),
        (r#"{"status": "approved"}"#, true),
        (r#"{"Is-Acceptable": "no"}"#, false),
        (r#"{"verdict": {"accept": false}}"#, false),
    ] {
        assert_eq!(read(text).map(|r| r.0), Some(want), "{text}");
    }
    // The first key of the list wins over later ones.
    assert_eq!(
        read(r#"{"status": "ok", "accept": false}"#).map(|r| r.0),
        Some(false)
    );
    // Feedback as a list, and prose with braces before the object.
    assert_eq!(
        read(r#"Checking {the reply}: {"accept": false, "issues": ["no date", " too long "]}"#),
        Some((false, Some("no date; too long".into())))
    );
}

#[test]
fn a_verdict_that_leads_a_cut_answer_counts() {
    let cut = parse(r#"{"accept": false, "feedback": "The answer forgets the dat"#).unwrap();
    assert_eq!(
        cut,
        Read {
            accept: false,
            feedback: Some("The answer forgets the…".into()),
            truncated: true,
        }
    );
    assert_eq!(
        read(r#"```json\n{"accept": false, "feedback": "The ans"#),
        Some((false, Some("The…".into())))
    );
    assert_eq!(
        read(r#"{"accept": false, "feedback": "Wrong"#),
        Some((false, None))
    );
    assert_eq!(
        read(r#"{"accept": true, "feedback": "Good, though the"#),
        Some((true, Some("Good, though…".into())))
    );
    assert_eq!(read(r#"{"accept": false, "feedb"#), Some((false, None)));
    assert_eq!(read(r#"{"accept": false, "#), Some((false, None)));
    assert_eq!(
        read(r#"{"accept": false, "feedback": "say \"hi\" then \"#),
        Some((false, Some("say \"hi\"…".into())))
    );
    // The verdict itself was cut: no verdict.
    assert_eq!(read(r#"{"accept": fal"#), None);
    assert_eq!(read(r#"{"feedback": "fine", "acc"#), None);
    assert_eq!(read(r#"{"accept"#), None);
}

#[test]
fn feedback_that_repeats_the_prompt_is_an_echo() {
    let prompt = [
        "You are a strict reviewer. Decide whether the candidate correctly and completely \
             answers the last request.",
        "Example: {\"accept\": false, \"feedback\": \"The reply names Lyon, but the capital \
             of France is Paris.\"}",
    ];
    for copy in [
        "Decide whether the candidate correctly and completely answers the last request",
        "the reply names lyon but the capital of france is paris",
        "You are a strict reviewer. Decide whether the candidate correctly answers the last request.",
        "...",
        "",
    ] {
        assert!(echoes(copy, &prompt), "{copy}");
    }
    for own in [
        "The reply gives the year, not the height.",
        "Too short: add the date of the treaty.",
        "wrong",
        "The candidate does not answer the last request about trains.",
    ] {
        assert!(!echoes(own, &prompt), "{own}");
    }
}
