#!/usr/bin/env bash
# Regenerates the simulated experiments' pages: for every scenarios/NAME.toml, runs
#   tidegate sim run scenarios/NAME.toml --out docs/experiments/NAME
# which writes NAME.md (the scenario file's head comment, the command, the tables), the SVG
# charts the page shows, and NAME.csv (the per-second series; not committed, see .gitignore).
# Deterministic: the same tree gives the same bytes.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --quiet --release -p tidegate
for file in scenarios/*.toml; do
    name="$(basename "$file" .toml)"
    target/release/tidegate sim run "$file" --out "docs/experiments/$name" >/dev/null 2>&1 ||
        { echo "tidegate sim run $file failed" >&2; exit 1; }
    echo "docs/experiments/$name/$name.md"
done
# The fleet scenarios with a page (scenarios/fleet/scale.toml is a speed check, without one).
for name in chain chain-fixed-edge; do
    target/release/tidegate sim fleet "scenarios/fleet/$name.toml" \
        --out "docs/experiments/fleet-$name" >/dev/null 2>&1 ||
        { echo "tidegate sim fleet scenarios/fleet/$name.toml failed" >&2; exit 1; }
    echo "docs/experiments/fleet-$name/fleet-$name.md"
done
