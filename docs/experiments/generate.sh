#!/usr/bin/env bash
# Regenerates the simulated experiments' pages: for every scenarios/NAME.toml, runs
#   tidegate sim run scenarios/NAME.toml --out docs/experiments/NAME
# which writes NAME.md (the scenario file's head comment, the command, the tables), the SVG
# charts the page shows, and NAME.csv (the per-second series; not committed, see .gitignore);
# then the fleet scenarios with a page (tidegate sim fleet scenarios/fleet/NAME.toml --out
# docs/experiments/fleet-NAME); then the robustness sweep,
#   tidegate sim sweep --out docs/experiments/robustness
# which writes robustness.md (the command, the tables by axis, the misses of the default),
# the two heatmaps, robustness.txt and robustness.json (not committed, see .gitignore).
# Deterministic: the same tree gives the same bytes. Then rewrites the README's and the docs'
# blocks marked `<!-- output of: tidegate ... -->` with what their commands print now (the
# test crates/tidegate/tests/doc_outputs.rs checks both in CI).
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
target/release/tidegate sim sweep --out docs/experiments/robustness >/dev/null 2>&1 ||
    { echo "tidegate sim sweep failed" >&2; exit 1; }
echo "docs/experiments/robustness/robustness.md"
TIDEGATE_BLESS=1 cargo test --quiet -p tidegate --test doc_outputs >/dev/null ||
    { echo "rewriting the marked blocks failed: cargo test -p tidegate --test doc_outputs" >&2; exit 1; }
echo "README.md and docs/: the blocks marked <!-- output of: ... -->"
