#!/usr/bin/env bash
# tidegate's pdc engine against the phantom-jams article's own tool, on the same arguments.
#
#   bench/pdc-tool.sh [DURATION PRODUCER RATE DISPATCHER CONSUMER RATE]
#
# Default arguments: 600 poisson 200000 uniform uniform 200000 (the issue's benchmark).
# The tool is pdc-model/simulate.cc of github.com/xemul/queue-dispatch, the simulator the
# article ran: it steps virtual time by 1 us, keeps messages in std::list and estimates
# quantiles with Boost's extended P-square. It is fetched with git (or taken from
# $PDC_TOOL_SRC, a path to simulate.cc) and built with g++ -O2; its build needs libfmt-dev and
# libboost-dev, installed from Debian's packages when missing. This is a benchmark, not a test:
# run it on a quiet machine and compare the two times of one run.
set -euo pipefail

args=("$@")
if [[ $# -eq 0 ]]; then
    args=(600 poisson 200000 uniform uniform 200000)
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
work="${TMPDIR:-/tmp}/tidegate-pdc-tool"
mkdir -p "$work"

# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"

need=()
[[ -e /usr/include/fmt/core.h ]] || need+=(libfmt-dev)
[[ -e /usr/include/boost/accumulators/accumulators.hpp ]] || need+=(libboost-dev)
command -v g++ >/dev/null || need+=(g++)
apt_install "${need[@]}"

src="${PDC_TOOL_SRC:-}"
if [[ -z "$src" ]]; then
    if [[ ! -d "$work/queue-dispatch" ]]; then
        git clone --quiet --depth 1 https://github.com/xemul/queue-dispatch "$work/queue-dispatch"
    fi
    src="$work/queue-dispatch/pdc-model/simulate.cc"
fi
g++ -O2 -std=c++20 -o "$work/simulate" "$src" -lfmt

build_tidegate

TIMEFORMAT=%R
# Runs a command, prints its output, then its wall-clock seconds on the last line.
timed() {
    { time "$@" >"$work/out" 2>&1; } 2>"$work/time"
    cat "$work/out"
    cat "$work/time"
}
echo "arguments: ${args[*]}"
echo "== the article's tool (g++ -O2, 1-us steps)"
tool_secs=$(timed "$work/simulate" "${args[@]}" | tee /dev/stderr | tail -1)
echo "== tidegate sim pdc (event-driven)"
ours_secs=$(timed "$tidegate" sim pdc "${args[@]}" | tee /dev/stderr | tail -1)
awk -v t="$tool_secs" -v o="$ours_secs" 'BEGIN { printf "wall seconds: tool %.3f, tidegate %.3f; ratio %.1fx\n", t, o, t / o }'
