use super::*;

fn arena(id: &str, models: &[&str], expires: i64) -> Arena {
    Arena {
        id: id.into(),
        route: "ab".into(),
        models: models.iter().map(|m| (*m).to_owned()).collect(),
        key: "team".into(),
        excerpt: "hello".into(),
        created: 100,
        expires,
    }
}

#[test]
fn an_arena_closes_once_for_its_own_key_before_it_expires() {
    let s = Store::in_memory(crate::clock::Clock::system()).unwrap();
    s.open_arena(&arena("one", &["x", "y"], 1000)).unwrap();
    s.open_arena(&arena("old", &["x", "y"], 150)).unwrap();
    assert_eq!(
        s.close_arena("one", "a", Some("other"), 200).unwrap(),
        Closed::NotYours
    );
    assert_eq!(
        s.close_arena("one", "a", Some("team"), 200).unwrap(),
        Closed::Now(arena("one", &["x", "y"], 1000))
    );
    assert_eq!(
        s.close_arena("one", "b", None, 201).unwrap(),
        Closed::Already("a".into())
    );
    assert_eq!(
        s.close_arena("old", "a", None, 200).unwrap(),
        Closed::Unknown
    );
    assert_eq!(
        s.close_arena("nope", "a", None, 200).unwrap(),
        Closed::Unknown
    );
    let votes = s.votes("ab").unwrap();
    assert_eq!(votes.len(), 1);
    assert_eq!((votes[0].outcome.as_str(), votes[0].at), ("a", 200));
}

#[test]
fn a_vote_that_does_not_fit_the_arena_leaves_it_open() {
    let s = Store::in_memory(crate::clock::Clock::system()).unwrap();
    s.open_arena(&arena("three", &["x", "y", "z"], 1000))
        .unwrap();
    for misfit in ["d", "rank:ba", "rank:bacd"] {
        assert_eq!(
            s.close_arena("three", misfit, None, 200).unwrap(),
            Closed::Misfit(3),
            "{misfit}"
        );
    }
    let now = s.close_arena("three", "rank:cab", None, 300).unwrap();
    assert_eq!(now, Closed::Now(arena("three", &["x", "y", "z"], 1000)));
    let votes = s.votes("ab").unwrap();
    assert_eq!(votes[0].models, ["x", "y", "z"]);
    assert_eq!(
        votes[0].pairs(),
        [
            ("x", "y", Side::First),
            ("x", "z", Side::Second),
            ("y", "z", Side::Second)
        ]
    );
    assert_eq!(
        s.pair_counts("ab").unwrap(),
        [
            ("x".into(), "y".into(), 1),
            ("x".into(), "z".into(), 1),
            ("y".into(), "z".into(), 1)
        ]
    );
}

#[test]
fn outcomes_stand_for_their_pairwise_results() {
    use Side::*;
    assert_eq!(pairwise(3, "b"), [(0, 1, Second), (1, 2, First)]);
    assert_eq!(pairwise(2, "a"), [(0, 1, First)]);
    assert_eq!(pairwise(3, "tie").len(), 3);
    assert_eq!(pairwise(4, "bad"), pairwise(4, "tie"));
    assert!(pairwise(4, "bad").iter().all(|p| p.2 == Tie));
    assert_eq!(
        pairwise(3, "rank:bca"),
        [(0, 1, Second), (0, 2, Second), (1, 2, First)]
    );
    assert_eq!(pairwise(6, "rank:fedcba").len(), 15);
    for none in ["skip", "d", "rank:ab", "rank:abz", "what"] {
        assert!(pairwise(3, none).is_empty(), "{none}");
    }
    assert_eq!(sizes("c"), (3, 6));
    assert_eq!(sizes("rank:dcba"), (4, 4));
    assert_eq!(sizes("tie"), (2, 6));
    assert_eq!(letter(2), 'c');
}

#[test]
fn a_pair_from_before_the_migration_is_read_as_two_models() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        let tx = conn.unchecked_transaction().unwrap();
        for step in &crate::store::MIGRATIONS[..6] {
            tx.execute_batch(step).unwrap();
        }
        tx.pragma_update(None, "user_version", 6).unwrap();
        tx.execute(
            "INSERT INTO arena (id, route, model_a, model_b, key, excerpt, created, expires, outcome, voted_at)
             VALUES ('old', 'ab', 'x', 'y', 'team', '', 1, 9999999999, 'b', 5),
                    ('open', 'ab', 'x', 'y', 'team', '', 1, 9999999999, NULL, NULL)",
            [],
        )
        .unwrap();
        tx.commit().unwrap();
    }
    let s = Store::open(&path, crate::clock::Clock::system()).unwrap();
    let votes = s.votes("ab").unwrap();
    assert_eq!(
        votes,
        [Vote {
            models: vec!["x".into(), "y".into()],
            outcome: "b".into(),
            at: 5
        }]
    );
    assert_eq!(votes[0].pairs(), [("x", "y", Side::Second)]);
    assert_eq!(
        s.close_arena("open", "tie", None, 10).unwrap(),
        Closed::Now(Arena {
            id: "open".into(),
            route: "ab".into(),
            models: vec!["x".into(), "y".into()],
            key: "team".into(),
            excerpt: String::new(),
            created: 1,
            expires: 9_999_999_999,
        })
    );
}
