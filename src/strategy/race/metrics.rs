//! The race's own metrics: candidates' rubric totals, races run as their
//! first candidate alone, and output tokens saved by cancelling early.

use crate::telemetry::{MetricKind, MetricSpec};

pub const RACE_SCORE: &str = "conclave_race_score";
pub const RACE_DOWNGRADES: &str = "conclave_race_downgrades_total";
pub const RACE_TOKENS_SAVED: &str = "conclave_race_tokens_saved_total";

/// Rubric totals run from 0 to 1.
const SCORE_BUCKETS: &[f64] = &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.999];

/// Declared in the race's strategy-table entry.
pub const METRICS: &[MetricSpec] = &[
    MetricSpec {
        name: RACE_SCORE,
        help: "Rubric totals of race candidates, by model",
        kind: MetricKind::Histogram(SCORE_BUCKETS),
    },
    MetricSpec {
        name: RACE_DOWNGRADES,
        help: "Races run as their first candidate alone, by reason",
        kind: MetricKind::Counter,
    },
    MetricSpec {
        name: RACE_TOKENS_SAVED,
        help: "Output tokens not generated because race candidates were cancelled early (estimate)",
        kind: MetricKind::Counter,
    },
];
