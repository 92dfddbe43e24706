use super::*;
use proptest::prelude::*;

#[test]
fn overlaps_are_trimmed_at_word_boundaries() {
    let cases = [
        ("the quick bro", "brown fox", "wn fox"),
        ("the quick bro", "quick brown fox", "wn fox"),
        ("the quick bro", "the quick brown fox", "wn fox"),
        ("the quick ", "quick brown", "brown"),
        ("the quick ", " brown", "brown"),
        ("the quick", " brown fox", " brown fox"),
        ("the quick", "quick brown", " brown"),
        ("Hello, world.", " world. Next", " Next"),
        ("Hello, world.", "Next one", "Next one"),
        ("a banana", "ana split", "ana split"),
        ("it costs 1", "12 dollars", "2 dollars"),
        ("", "anything", "anything"),
        ("x", "", ""),
        ("naïve café", "café au lait", " au lait"),
    ];
    for (partial, cont, want) in cases {
        let cut = overlap(partial, cont);
        assert_eq!(&cont[cut..], want, "{partial:?} + {cont:?}");
    }
}

#[test]
fn the_seam_holds_text_until_it_can_tell() {
    let mut s = Seam::new("one two thr".into());
    assert_eq!(s.push("two"), "");
    assert_eq!(s.push(" thr"), "");
    assert_eq!(s.push("ee four"), "ee four");
    assert_eq!(s.trimmed(), Some(7));
    assert_eq!(s.push(" five"), " five");
    let mut s = Seam::new("one two".into());
    assert_eq!(s.push(" three"), " three");
    assert_eq!(s.trimmed(), Some(0));
    let mut s = Seam::new("one two".into());
    assert_eq!(s.push("two"), "");
    assert_eq!(s.flush(), "");
    assert_eq!(s.trimmed(), Some(3));
}

const ROME: &str = "Rome, Italy's capital city, has a rich and storied history that";

/// The kept text and the join of `cont` pushed whole after `partial`.
fn spliced(partial: &str, cont: &str) -> (String, Join) {
    let mut s = Seam::new(partial.to_owned());
    let mut out = s.push(cont);
    out.push_str(&s.flush());
    (out, s.join().unwrap())
}

#[test]
fn the_partials_tail_is_found_anywhere_in_the_window() {
    let cases = [
        (
            "Sure, here it is: a rich and storied history that dates back to 753 BC.",
            " dates back to 753 BC.",
        ),
        // Case, whitespace and the punctuation around words differ.
        (
            "A  RICH and\nstoried History that, dating from 753 BC.",
            ", dating from 753 BC.",
        ),
        // A restart word for word is found by its tail.
        (
            "Rome, Italy's capital city, has a rich and storied history that dates back.",
            " dates back.",
        ),
    ];
    for (cont, want) in cases {
        assert_eq!(
            spliced(ROME, cont),
            (want.to_owned(), Join::Tail),
            "{cont:?}"
        );
    }
    // A cut inside the last word: its start is found in the window.
    let (out, join) = spliced(
        "a rich and storied hist",
        "Okay. A rich and storied history that dates back.",
    );
    assert_eq!((out.as_str(), join), ("ory that dates back.", Join::Tail));
    // Past the window, the tail is not looked for.
    let filler = "word ".repeat(WINDOW_WORDS);
    let cont = format!("{filler}a rich and storied history that dates");
    assert_eq!(spliced(ROME, &cont), (cont.clone(), Join::None));
}

#[test]
fn a_restart_keeps_only_what_follows_the_repeated_answer() {
    // The case seen on a real server: a paraphrase from the top.
    let (out, join) = spliced(
        ROME,
        "Rome, Italy's capital city, has a storied history that dates back more than 2,500 years.",
    );
    assert_eq!(join, Join::Restart);
    assert_eq!(out, " dates back more than 2,500 years.");
    // Cut inside a word.
    let (out, _) = spliced(
        "Rome, Italy's capital city, has a rich and storied hist",
        "Rome, Italy's capital city has a long and storied history that dates back.",
    );
    assert_eq!(out, "ory that dates back.");
    // Nothing of the partial's end in the paraphrase: as many words
    // as the partial has are dropped.
    let (out, join) = spliced(
        ROME,
        "rome, italy's CAPITAL city, boasts an ancient past, full of wonder. It dates back to 753 BC.",
    );
    assert_eq!(join, Join::Restart);
    assert_eq!(out, " It dates back to 753 BC.");
    // A continuation that merely starts like the partial's end is no
    // restart.
    let (out, join) = spliced("The cat sat on the mat. The", " dog barked.");
    assert_eq!((out.as_str(), join), (" dog barked.", Join::None));
}

#[test]
fn a_continuation_is_held_until_the_seam_is_known_and_no_longer() {
    let cont =
        "Rome, Italy's capital city, has a storied history that dates back more than 2,500 years.";
    let mut s = Seam::new(ROME.to_owned());
    let mut out = String::new();
    let pieces: Vec<&str> = cont.split_inclusive(' ').collect();
    for p in &pieces {
        let got = s.push(p);
        // Fewer words than the window: nothing is decided before the end.
        assert_eq!(got, "");
        out.push_str(&got);
    }
    out.push_str(&s.flush());
    assert_eq!(out, " dates back more than 2,500 years.");
    // The whole tail found: released at once, without waiting for
    // the window.
    let mut s = Seam::new(ROME.to_owned());
    assert_eq!(s.push("Sure: "), "");
    assert_eq!(s.push("has a rich and storied history that"), "");
    assert_eq!(s.join(), None, "seven words of the tail: more may come");
    let mut s = Seam::new(ROME.to_owned());
    assert_eq!(
        s.push("Sure: city, has a rich and storied history that"),
        ""
    );
    assert_eq!(s.join(), Some(Join::Tail));

    // A full window is decided without the continuation's end.
    let mut s = Seam::new(ROME.to_owned());
    let words = "new ".repeat(WINDOW_WORDS + 1);
    assert_eq!(s.push(&words), words);
    assert_eq!(s.join(), Some(Join::None));
    // Text without whitespace is held no more than MAX_HELD bytes.
    let mut s = Seam::new(ROME.to_owned());
    let blob = "x".repeat(MAX_HELD / 2);
    assert_eq!(s.push(&blob), "");
    assert_eq!(s.push(&blob).len(), MAX_HELD);
}

fn words() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec("[a-z]{1,8}[,.]?", 2..40)
}

proptest! {
    /// A model that repeats 0..3 whole words before the cut (and the
    /// rest of a word the cut split) splices back to the full text.
    #[test]
    fn a_repeating_continuation_splices_exactly(
        ws in words(),
        cut in 1usize..400,
        repeat in 0usize..3,
    ) {
        let full = ws.join(" ");
        let cut = cut.min(full.len() - 1).max(1);
        let partial = &full[..cut];
        // Back to the start of the word the cut is in, then `repeat`
        // words more.
        let mut start = partial.rfind(' ').map_or(0, |i| i + 1);
        for _ in 0..repeat {
            start = full[..start.saturating_sub(1)].rfind(' ').map_or(0, |i| i + 1);
        }
        let cont = &full[start..];
        let mut seam = Seam::new(partial.to_owned());
        let mut out = String::new();
        for piece in cont.split_inclusive(' ') {
            out.push_str(&seam.push(piece));
        }
        out.push_str(&seam.flush());
        prop_assert_eq!(format!("{partial}{out}"), full);
    }

    /// A continuation that picks up exactly where the partial stops
    /// (at a word's end; words not repeated) loses nothing. (A cut
    /// inside a word whose start is also a word, "a" + "ab", cannot be
    /// told from a repeat: the repeat wins, as models repeat.)
    #[test]
    fn a_clean_continuation_is_kept_whole(ws in words(), cut in 1usize..40) {
        let mut seen = std::collections::HashSet::new();
        prop_assume!(ws.iter().all(|w| seen.insert(w.trim_end_matches([',', '.']).to_owned())));
        let cut = cut.min(ws.len() - 1);
        let partial = ws[..cut].join(" ");
        let full = ws.join(" ");
        let cont = &full[partial.len()..];
        let mut seam = Seam::new(partial.to_owned());
        let mut out = seam.push(cont);
        out.push_str(&seam.flush());
        prop_assert_eq!(format!("{partial}{out}"), full);
    }

    /// A model that starts the answer over, in its own case and
    /// spacing, splices back to the full text (as words).
    #[test]
    fn a_restart_from_the_top_splices_back(
        ws in words(),
        cut in 1usize..40,
        upper in prop::collection::vec(any::<bool>(), 40),
        gap in prop::collection::vec(prop::sample::select(vec![" ", "  ", "\n", " \n "]), 40),
    ) {
        let mut seen = std::collections::HashSet::new();
        prop_assume!(ws.iter().all(|w| seen.insert(w.trim_end_matches([',', '.']).to_owned())));
        let cut = cut.min(ws.len() - 1);
        let partial = ws[..cut].join(" ");
        let cont: String = ws
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let w = if upper[i % 40] { w.to_uppercase() } else { w.clone() };
                if i == 0 { w } else { format!("{}{w}", gap[i % 40]) }
            })
            .collect();
        let mut seam = Seam::new(partial.clone());
        let mut out = String::new();
        for piece in cont.split_inclusive(' ') {
            out.push_str(&seam.push(piece));
        }
        out.push_str(&seam.flush());
        let norm = |s: &str| s.split_whitespace().map(str::to_lowercase).collect::<Vec<_>>();
        prop_assert_eq!(norm(&format!("{partial}{out}")), norm(&ws.join(" ")));
    }
}
