//! The vote's own metric: how much of a vote's answered samples agreed
//! with the winner.

use crate::telemetry::{MetricKind, MetricSpec};

pub const VOTE_AGREEMENT: &str = "conclave_vote_agreement";

/// Shares of agreeing samples: `le="0.5"` holds the votes without a
/// majority, `le="1"` less `le="0.999"` the unanimous ones.
const AGREEMENT_BUCKETS: &[f64] = &[0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.999, 1.0];

/// Declared in the vote's strategy-table entry.
pub const METRICS: &[MetricSpec] = &[MetricSpec {
    name: VOTE_AGREEMENT,
    help: "Share of a vote's answered samples that gave the winning answer, by route",
    kind: MetricKind::Histogram(AGREEMENT_BUCKETS),
}];
