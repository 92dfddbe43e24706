//! The count of a vote as samples finish: each answer's count in the
//! order answers first appeared, who wins now (the most votes; ties to the
//! answer whose first sample finished first, or to the `tie_break`
//! member's answer when it gave one of the tied), and whether the
//! samples still out could change that ([`Tally::decided`], for
//! `early_stop`).

/// How ties between the most common answers are broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TieBreak {
    /// The answer whose first sample finished first.
    First,
    /// The answer this member (by index) gave first, if it gave one of
    /// the tied; else as `First`.
    Member(usize),
}

/// One answer and its votes.
#[derive(Debug, Clone)]
pub struct Entry {
    pub answer: String,
    pub count: usize,
    /// The first sample (by index) that gave it: the one returned.
    pub first: usize,
    /// When the tie-break member first gave it (its rank among that
    /// member's answers), if it did.
    by_tie_member: Option<usize>,
}

#[derive(Debug)]
pub struct Tally {
    tie_break: TieBreak,
    /// In the order the answers first appeared.
    entries: Vec<Entry>,
    /// Answers the tie-break member gave so far.
    tie_member_answers: usize,
}

impl Tally {
    pub fn new(tie_break: TieBreak) -> Self {
        Tally {
            tie_break,
            entries: Vec::new(),
            tie_member_answers: 0,
        }
    }

    /// Sample `sample` of member `member` finished with `answer`.
    pub fn add(&mut self, answer: &str, sample: usize, member: usize) {
        let by_tie = self.tie_break == TieBreak::Member(member);
        let rank = self.tie_member_answers;
        if by_tie {
            self.tie_member_answers += 1;
        }
        match self.entries.iter_mut().find(|e| e.answer == answer) {
            Some(e) => {
                e.count += 1;
                if by_tie && e.by_tie_member.is_none() {
                    e.by_tie_member = Some(rank);
                }
            }
            None => self.entries.push(Entry {
                answer: answer.to_owned(),
                count: 1,
                first: sample,
                by_tie_member: by_tie.then_some(rank),
            }),
        }
    }

    /// Every answer with its count, in the order they first appeared.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Samples that gave an answer.
    pub fn answered(&self) -> usize {
        self.entries.iter().map(|e| e.count).sum()
    }

    /// The index of the winning entry now.
    fn lead(&self) -> Option<usize> {
        let top = self.entries.iter().map(|e| e.count).max()?;
        let tied = || {
            self.entries
                .iter()
                .enumerate()
                .filter(move |(_, e)| e.count == top)
        };
        let by_member = tied()
            .filter_map(|(i, e)| e.by_tie_member.map(|r| (r, i)))
            .min()
            .map(|(_, i)| i);
        by_member.or_else(|| tied().map(|(i, _)| i).next())
    }

    /// The winning answer now.
    pub fn winner(&self) -> Option<&Entry> {
        self.lead().map(|i| &self.entries[i])
    }

    /// Whether `remaining` more samples could no longer change the winner,
    /// whatever they answer. With a tie-break member, a lead must be
    /// strict (that member's later samples could turn a tie).
    pub fn decided(&self, remaining: usize) -> bool {
        if remaining == 0 {
            return true;
        }
        let Some(w) = self.lead() else {
            return false;
        };
        let lead = self.entries[w].count;
        let first = self.tie_break == TieBreak::First;
        // An answer not seen yet appears after every answer seen.
        let unseen = remaining < lead || (first && remaining == lead);
        unseen
            && self.entries.iter().enumerate().all(|(i, e)| {
                let most = e.count + remaining;
                i == w || most < lead || (first && most == lead && i > w)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(tie: TieBreak, votes: &[(&str, usize)]) -> Tally {
        let mut t = Tally::new(tie);
        for (i, (a, m)) in votes.iter().enumerate() {
            t.add(a, i, *m);
        }
        t
    }

    fn winner(t: &Tally) -> &str {
        t.winner().map_or("", |e| e.answer.as_str())
    }

    #[test]
    fn the_most_common_answer_wins_and_ties_go_to_the_first() {
        let t = tally(TieBreak::First, &[("b", 0), ("a", 0), ("a", 0), ("b", 0)]);
        assert_eq!(winner(&t), "b");
        assert_eq!(t.winner().map(|e| e.first), Some(0));
        let t = tally(TieBreak::First, &[("b", 0), ("a", 0), ("a", 0)]);
        assert_eq!(winner(&t), "a");
        assert_eq!(t.winner().map(|e| (e.first, e.count)), Some((1, 2)));
        assert_eq!(t.answered(), 3);
        assert_eq!(Tally::new(TieBreak::First).winner().map(|e| e.count), None);
    }

    #[test]
    fn a_named_member_breaks_ties_when_it_gave_a_tied_answer() {
        // Member 1 gave "a" (its first answer) and "c".
        let votes = [("b", 0), ("a", 1), ("c", 1), ("b", 2), ("a", 2)];
        assert_eq!(winner(&tally(TieBreak::Member(1), &votes)), "a");
        assert_eq!(winner(&tally(TieBreak::First, &votes)), "b");
        // Member 2 gave both tied answers: the one it gave first.
        assert_eq!(winner(&tally(TieBreak::Member(2), &votes)), "b");
        // Member 1 gave neither of the tied: the first to finish.
        let votes = [("b", 0), ("a", 2), ("c", 1), ("b", 2), ("a", 0)];
        assert_eq!(winner(&tally(TieBreak::Member(1), &votes)), "b");
        // A tie-break never beats a higher count.
        let votes = [("b", 0), ("a", 1), ("b", 0)];
        assert_eq!(winner(&tally(TieBreak::Member(1), &votes)), "b");
    }

    #[test]
    fn decided_once_the_rest_cannot_overturn_the_lead() {
        let first = TieBreak::First;
        // 2 of 5 agree, 3 to come: an unseen answer could still win.
        assert!(!tally(first, &[("a", 0), ("a", 0)]).decided(3));
        // 3 of 5 agree: nothing can catch up.
        assert!(tally(first, &[("a", 0), ("a", 0), ("a", 0)]).decided(2));
        // 2 of 4 agree: the rest can only tie, and ties go to the first.
        assert!(tally(first, &[("a", 0), ("a", 0)]).decided(2));
        // ... unless the tie is broken by a member.
        assert!(!tally(TieBreak::Member(0), &[("a", 0), ("a", 0)]).decided(2));
        assert!(tally(TieBreak::Member(0), &[("a", 0), ("a", 0)]).decided(1));
        // b finished first: tied by the last sample, it would win.
        let t = tally(first, &[("b", 0), ("a", 0), ("a", 0)]);
        assert_eq!(winner(&t), "a");
        assert!(!t.decided(1));
        // a finished first: b tying it would not win.
        let t = tally(first, &[("a", 0), ("b", 0), ("a", 0)]);
        assert!(t.decided(1));
        assert!(!t.decided(2));
        // Nothing answered yet: never decided while samples are out.
        assert!(!Tally::new(first).decided(1));
        assert!(Tally::new(first).decided(0));
    }
}
