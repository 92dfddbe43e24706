//! `conclave eval`: run a checkable task set through routes and report
//! whether a strategy pays off.
//!
//! - [`task`]: the JSONL task file, parsed and validated once (every error
//!   with its line).
//! - [`check`]: grading an answer against a task's check (and the judge's
//!   prompt and verdict for `judge` checks).
//! - [`stats`]: confidence intervals, the paired test and percentiles.

pub mod check;
pub mod stats;
pub mod task;
