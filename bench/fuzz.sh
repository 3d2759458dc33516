#!/usr/bin/env bash
# The proxy's parsers under millions of generated inputs: the property tests that CI runs with
# proptest's default 256 cases (the configuration file with any value for any key, any text,
# durations, address blocks; the priority and caller-key headers, hop-by-hop stripping and
# the refusals over arbitrary header maps), here with many more, in release mode.
#
#   bench/fuzz.sh [CASES]     (default: 1000000 cases per property)
#
# A failure prints proptest's minimal failing input and exits non-zero. Not a benchmark:
# a long run of tests that would be too slow for CI.
set -euo pipefail

cases="${1:-1000000}"
root="$(cd "$(dirname "$0")/.." && pwd)"
export PROPTEST_CASES="$cases"
# Failures are kept by proptest in proptest-regressions/ next to the tests, for the next run.
started=$(date +%s)
cargo test --release --manifest-path "$root/Cargo.toml" -p tidegate-proxy --test parsers
cargo test --release --manifest-path "$root/Cargo.toml" -p tidegate-proxy --lib -- header_props trust::
echo "fuzz.sh: $cases cases per property, all held, in $(( $(date +%s) - started )) s"
