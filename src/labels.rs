//! The bounded label sets every layer shares: the role of a call, the
//! verdict on an attempt, and whether a local model was warm. A leaf
//! module: it imports nothing of conclave, so strategies, upstreams and
//! telemetry can all use it without depending on each other.

/// The role a call plays in its strategy. The set is DESIGN's, so the
/// strategies still to come have their labels already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Direct,
    Tier,
    Verifier,
    Panel,
    Synthesis,
    Default,
    Candidate,
    Judge,
    Contestant,
    Base,
    Oracle,
    /// A balance's member.
    Member,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Direct => "direct",
            Role::Tier => "tier",
            Role::Verifier => "verifier",
            Role::Panel => "panel",
            Role::Synthesis => "synthesis",
            Role::Default => "default",
            Role::Candidate => "candidate",
            Role::Judge => "judge",
            Role::Contestant => "contestant",
            Role::Base => "base",
            Role::Oracle => "oracle",
            Role::Member => "member",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Accept,
    Escalate,
    Error,
    Winner,
    Loser,
    Cancelled,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Accept => "accept",
            Verdict::Escalate => "escalate",
            Verdict::Error => "error",
            Verdict::Winner => "winner",
            Verdict::Loser => "loser",
            Verdict::Cancelled => "cancelled",
        }
    }
}

/// Whether the model was loaded when the call started (llama-swap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Warm {
    Yes,
    No,
    Unknown,
}

impl Warm {
    pub fn as_str(self) -> &'static str {
        match self {
            Warm::Yes => "true",
            Warm::No => "false",
            Warm::Unknown => "unknown",
        }
    }
    pub fn as_bool(self) -> Option<bool> {
        match self {
            Warm::Yes => Some(true),
            Warm::No => Some(false),
            Warm::Unknown => None,
        }
    }
}
