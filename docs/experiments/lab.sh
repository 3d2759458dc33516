#!/usr/bin/env bash
# Re-runs every real-socket page of docs/lab.md's results table:
#   tidegate experiment scenarios/NAME.toml --out docs/experiments/NAME ...
# with each scenario's arguments from that table, and prints how many runs agree with the
# simulator. About 35 minutes: the capacity demo's files and kanaloa-negative run at full
# length (300-330 s an arm) side by side, as they load the machine little (5 and 180
# requests a second); then the others one at a time, as their rates (250-3,000 requests a
# second) want the machine to themselves. Unlike generate.sh this is not deterministic:
# real sockets and a shared machine give figures that move a little from run to run.
#
# Usage: docs/experiments/lab.sh [NAME ...]   (default: every scenario of the table)
set -euo pipefail
cd "$(dirname "$0")/../.."

# Each scenario's arguments, as in docs/lab.md's table.
arguments() {
    case "$1" in
    capacity-slow) args=(--arms 'off,fixed 5 (demo),aimd (demo),tidegate default') ;;
    capacity-fixed) args=(--arms 'fixed 5 (demo),tidegate default') ;;
    capacity-adaptive) args=(--arms 'off,aimd (demo),tidegate default') ;;
    capacity-baseline) args=(--time-scale 5 --arms 'off,tidegate default') ;;
    kanaloa-negative) args=(--arms 'off,kanaloa (hillclimb+pie),tidegate default') ;;
    rsocket-leases) args=(--time-scale 2 --arms 'off,lease 9999,lease 100,lease 30,tidegate default') ;;
    kanaloa-positive) args=(--time-scale 3 --arms 'off,kanaloa (hillclimb+pie),tidegate default') ;;
    cinnamon-tiers) args=(--time-scale 10 --load 1000 --load 3000 --arms 'off,cinnamon (autotune+pid),tidegate default') ;;
    *) return 1 ;;
    esac
}
SIDE_BY_SIDE=(capacity-slow capacity-fixed capacity-adaptive capacity-baseline kanaloa-negative)
ALONE=(rsocket-leases kanaloa-positive cinnamon-tiers)

wanted=("$@")
if [ ${#wanted[@]} -eq 0 ]; then
    wanted=("${SIDE_BY_SIDE[@]}" "${ALONE[@]}")
fi
for name in "${wanted[@]}"; do
    arguments "$name" || { echo "unknown scenario $name; known: ${SIDE_BY_SIDE[*]} ${ALONE[*]}" >&2; exit 2; }
done

cargo build --quiet --release -p tidegate
logs="$(mktemp -d)"

experiment() {
    local name=$1 args
    arguments "$name"
    target/release/tidegate experiment "scenarios/$name.toml" "${args[@]}" \
        --out "docs/experiments/$name" >"$logs/$name.txt" 2>&1 ||
        { echo "tidegate experiment $name failed: $logs/$name.txt" >&2; return 1; }
    echo "$name: $(tail -n 2 "$logs/$name.txt" | head -n 1)"
}

pids=()
for name in "${wanted[@]}"; do
    if [[ " ${SIDE_BY_SIDE[*]} " == *" $name "* ]]; then
        experiment "$name" &
        pids+=($!)
    fi
done
status=0
for pid in "${pids[@]}"; do
    wait "$pid" || status=1
done
for name in "${wanted[@]}"; do
    if [[ " ${ALONE[*]} " == *" $name "* ]]; then
        experiment "$name" || status=1
    fi
done
echo "logs in $logs"
exit $status
