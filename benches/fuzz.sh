#!/usr/bin/env bash
# Runs the property-based fuzz tests (tests/it/fuzz.rs) for much longer than
# the test command does: CASES cases per property (default 100000).
#   bash benches/fuzz.sh            # about 3 minutes on the 2-core box
#   CASES=1000000 bash benches/fuzz.sh
# A failure prints the minimal input and saves it to
# tests/it/fuzz.proptest-regressions; turn it into a unit test.
set -euo pipefail
cd "$(dirname "$0")/.."
PROPTEST_CASES="${CASES:-100000}" exec cargo test --release --test it fuzz:: -- --nocapture
