#!/usr/bin/env bash
# Issue 15's chain on real sockets (docs/experiments/chain-lab.md): a 2-hop chain on 127.0.0.1,
# each hop 3 `tidegate proxy` processes in front of 3 `tidegate origin`s (each proxy balancing
# over all 3), A's origins calling B through B's proxies (`tidegate origin --call`), three
# `tidegate load`s as the clients (one per A proxy, a caller key each request, tiers 0-5).
# A third of the way in, B's origins slow down to half their capacity, and the clients offer
# 3x what the chain can then complete. Two arms: `feedback` (B's cut-off, `tidegate-cutoff`,
# honoured by A's origins and passed on to A's proxies) and `no feedback` (A's origins ignore
# it: `tidegate origin --ignore-cutoff`).
#
# Printed per arm, over the requests after the drop (from a scrape 5 s after it to the end):
# chain goodput (chains A's origins completed, a second, against B's capacity), tiers 0-1
# served (the clients' whole run), and wasted work (A's calls that failed at B or were held
# back, as a share of A's calls: work A's origins did for nothing).
#
# Not measured here: cohort agreement (the proxies do not report whom they shed) and retry
# amplification (`tidegate load` does not retry); the simulator's fleet pages measure both.
#
# Usage: docs/experiments/chain-lab.sh [--quick]   (--quick: 15 s an arm instead of 45 s)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"

duration=45
if [[ ${1:-} == --quick ]]; then duration=15; fi
drop=$((duration / 3))
measure_from=$((drop + 5))
# B: 3 origins of 2 workers at 10 ms = 600/s, 300/s after the drop; offered 3x that.
workers=2 work_ms=10 rate_per_client=300 capacity_after=300

bench_start chain-lab
build_tidegate
base=$((20000 + RANDOM % 20000))

# start_proxy NAME PORT ADMIN UPSTREAM...: writes a proxy's file (the cohort from the caller
# key, the same salt everywhere) and starts it.
start_proxy() {
    local name=$1 port=$2 admin=$3
    shift 3
    {
        echo "listen = \"127.0.0.1:$port\""
        echo "admin = \"127.0.0.1:$admin\""
        echo "threads = 1"
        echo "[priority]"
        echo "caller_key_header = \"x-user\""
        # As the simulator's fleet arms: no wait bound, so that PIE cuts by rank (with the
        # default bound the gates turn arrivals away as "queue full" whatever their tier).
        echo "[gate.queue]"
        echo "wait_bound = inf"
        for upstream in "$@"; do
            echo "[[upstreams]]"
            echo "url = \"http://127.0.0.1:$upstream\""
        done
    } >"$work/$name.toml"
    "$tidegate" proxy --config "$work/$name.toml" --log-level warn >"$work/$name.log" 2>&1 &
    pids+=($!)
}

# start_origin NAME PORT ARG...: starts an origin on PORT with ARGs.
start_origin() {
    local name=$1 port=$2
    shift 2
    "$tidegate" origin --listen "127.0.0.1:$port" "$@" >"$work/$name.log" 2>&1 &
    pids+=($!)
}

# scrape PORT SERIES: a series' value on an origin's /metrics (0 when absent).
scrape() {
    curl -fsS "http://127.0.0.1:$1/metrics" | awk -v s="$2" '$1 == s { print $2; found = 1 } END { if (!found) print 0 }'
}

# calls PORT...: ok, held back and failed calls summed over A's origins.
calls() {
    local ok=0 held=0 failed=0 port
    for port in "$@"; do
        ok=$((ok + $(scrape "$port" 'tidegate_origin_calls_total{outcome="ok"}')))
        held=$((held + $(scrape "$port" 'tidegate_origin_calls_total{outcome="held_back"}')))
        failed=$((failed + $(scrape "$port" 'tidegate_origin_calls_total{outcome="failed"}')))
    done
    echo "$ok $held $failed"
}

run_arm() {
    local arm=$1 i port
    local ignore=()
    [[ $arm == "no feedback" ]] && ignore=(--ignore-cutoff)
    local b_origins=() b_proxies=() a_origins=() a_proxies=()
    pids=()
    for i in 0 1 2; do
        b_origins+=($((base + i)))
        start_origin "b-origin-$i" "${b_origins[i]}" --workers "$workers" --work "${work_ms}ms" \
            --change "${drop}s:work=$((2 * work_ms))ms" --seed $((i + 1))
    done
    for i in 0 1 2; do
        b_proxies+=($((base + 10 + i)))
        start_proxy "b-proxy-$i" "${b_proxies[i]}" $((base + 20 + i)) "${b_origins[@]}"
    done
    for i in 0 1 2; do
        a_origins+=($((base + 30 + i)))
        start_origin "a-origin-$i" "${a_origins[i]}" --workers 16 --work 1ms --seed $((i + 11)) \
            --call "http://127.0.0.1:${b_proxies[i]}/" "${ignore[@]}"
    done
    for i in 0 1 2; do
        a_proxies+=($((base + 40 + i)))
        start_proxy "a-proxy-$i" "${a_proxies[i]}" $((base + 50 + i)) "${a_origins[@]}"
    done
    for port in "${b_origins[@]}" "${b_proxies[@]}" "${a_origins[@]}" "${a_proxies[@]}"; do
        wait_port "$port"
    done
    local loads=()
    for i in 0 1 2; do
        "$tidegate" load "http://127.0.0.1:${a_proxies[$i]}/" --rate "$rate_per_client" \
            --duration "${duration}s" --arrivals poisson --timeout 1s --seed $((i + 21)) \
            --tiers 0:10,1:10,2:20,3:20,4:20,5:20 --cohort-keys 3000 --key-header x-user \
            --json >"$work/load-$i.json" 2>"$work/load-$i.log" &
        loads+=($!)
    done
    sleep "$measure_from"
    read -r ok0 held0 failed0 <<<"$(calls "${a_origins[@]}")"
    local t0
    t0=$(date +%s.%N)
    for pid in "${loads[@]}"; do wait "$pid"; done
    read -r ok1 held1 failed1 <<<"$(calls "${a_origins[@]}")"
    local t1
    t1=$(date +%s.%N)
    stop_started
    python3 - "$arm" "$t0" "$t1" "$capacity_after" "$((ok1 - ok0))" "$((held1 - held0))" \
        "$((failed1 - failed0))" "$work"/load-*.json <<'EOF'
import json, sys
arm, t0, t1, capacity, ok, held, failed = sys.argv[1], *map(float, sys.argv[2:8])
window = t1 - t0
important = [0, 0]
for path in sys.argv[8:]:
    for tier in json.load(open(path))["tiers"]:
        if tier["tier"] <= 1:
            important[0] += tier["offered"]
            important[1] += tier["ok"]
calls = ok + held + failed
goodput = ok / window
print(f"| {arm} | {goodput:.0f}/s ({goodput / capacity:.1%}) | "
      f"{important[1] / max(important[0], 1):.1%} | "
      f"{(held + failed) / max(calls, 1):.1%} ({held + failed:.0f} of {calls:.0f}: "
      f"{held:.0f} held back, {failed:.0f} failed) |")
EOF
}

echo "| arm | chain goodput (of ${capacity_after}/s) | tiers 0-1 served | wasted work at A |"
echo "|---|---|---|---|"
run_arm feedback
run_arm "no feedback"
