#!/usr/bin/env bash
# Issue 15's chain on real sockets (docs/experiments/chain-lab.md): a 2-hop chain on 127.0.0.1,
# each hop 3 `tidegate proxy` processes in front of 3 `tidegate origin`s (each proxy balancing
# over all 3), A's origins calling B through B's proxies (`tidegate origin --call`, each
# origin round-robin over all 3, one cut-off held for them), three
# `tidegate load`s as the clients (one per A proxy, 600 caller keys shared by the three, each
# key always the same tier, tiers 0-5), retrying as `tidegate-tower`'s RetryLayer does.
# A third of the way in, B's origins slow down to half their capacity, and the clients offer
# 3x what the chain can then complete. Arms: `tidegate` (everything on: B's gates know their
# callers hold back what they cut, PIE's `callers_hold_back`; the proxies of each hop share
# their limits, and A's their drop ratios, through the origins, `[peers]` and `tidegate
# origin --peers`, docs/peers.md; A's gates draw their line at least at the share they shed,
# PIE's `line_at_shed_share`, and where their peers' lines lie on average, PIE's
# `line_at_peers`); `no peers` (the same without that exchange); `no
# feedback` (A's origins ignore B's cut-off, `tidegate-cutoff`: `tidegate origin
# --ignore-cutoff`); `no shared salt` (each A proxy hashes caller keys to cohorts with its
# own salt); `naive retries` (the clients retry at once, 3 attempts, no budget, whatever
# Retry-After says); `no shed-share line` (the same as `tidegate` but for A's gates, which
# draw their priority line at PIE's `p` alone instead of at least at the share they shed,
# `line_at_shed_share`, nor at their peers'); `no peers' line` (A's gates each draw their own
# line, at least at the share they shed, not at their peers' mean line).
#
# Printed per arm, over the requests after the drop (from 5 s after it to the end):
# cohort agreement (of the keys an A proxy shed in a second, among those at least two A
# proxies saw, the share every A proxy that saw them shed: the loads' attempt logs, each
# load sending to one proxy, a shed told by its `tidegate-shed` header), wasted work (A's
# calls that failed at B or were held back, as a share of A's calls: work A's origins did
# for nothing), attempts per request (the attempt logs), chain goodput (chains A's origins
# completed, a second, against B's capacity), tiers 0-1 served (the clients' whole run), why
# the A proxies refused in the key-seconds that disagree (the `tidegate-shed` reasons in the
# attempt logs) and the spread of the limits in force at A's and B's gates as the window
# opens (for each origin, the least and the greatest over the 3 gates in front of it, from the
# proxies' /metrics), how sharp the line the A proxies drew was (of the keys of each tier, those
# shed in more than 5% and less than 95% of their requests in the window: a line drawn by rank
# alone, the same at every proxy, sheds a key in full or not at all, but for the keys of the
# cohort it cuts through and those whose cohort changes), and what A's gates did in the window
# (sampled from their /metrics every 150 ms: the median drop ratio of their regulators, the
# ratio their line is drawn at, the median queue and the median wait of its oldest entry, and
# the requests a gate expired and its regulator turned away, a second).
#
# Usage: docs/experiments/chain-lab.sh [--quick] [--arm NAME]...
#   --quick: 15 s an arm instead of 45 s
#   --arm NAME: run only this arm (repeat for several, in that order; a name it does not know is
#     a usage error): paired runs of two arms take a minute and a half rather than six
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"

all_arms=(tidegate "no peers" "no feedback" "no shared salt" "naive retries" "no shed-share line"
    "no peers' line")
duration=45
arms=()
while (($#)); do
    case $1 in
        --quick) duration=15 ;;
        --arm)
            known=0
            for arm in "${all_arms[@]}"; do [[ ${2:-} == "$arm" ]] && known=1; done
            if ((!known)); then
                echo "chain-lab.sh: --arm ${2:-(missing)}: not one of: $(printf '"%s" ' "${all_arms[@]}")" >&2
                exit 2
            fi
            arms+=("$2")
            shift
            ;;
        *)
            echo "usage: $0 [--quick] [--arm NAME]..." >&2
            exit 2
            ;;
    esac
    shift
done
((${#arms[@]})) || arms=("${all_arms[@]}")
drop=$((duration / 3))
measure_from=$((drop + 5))
# B: 3 origins of 2 workers at 10 ms = 600/s, 300/s after the drop; offered 3x that.
workers=2 work_ms=10 rate_per_client=300 capacity_after=300

bench_start chain-lab
build_tidegate
# The 53 ports of an arm (base to base + 52) stay below Linux's ephemeral range (32768-60999,
# /proc/sys/net/ipv4/ip_local_port_range), from which the processes' own outgoing connections
# take their local ports: a listener whose port one of them held failed to start.
base=$((20000 + RANDOM % 12000))

# start_proxy NAME PORT ADMIN SALT HOLD PEERS LINE UPSTREAM...: writes a proxy's file (the
# cohort from the caller key, hashed with SALT; HOLD: whether its callers hold back what it
# cuts, PIE's `callers_hold_back`; PEERS: what it shares with the other proxies of its hop,
# `off`, `edge` or `behind`; LINE: PIE's `line_at_shed_share`, a half-life, or `off`, and
# with `+peers` after the half-life, `line_at_peers` too) and starts it.
start_proxy() {
    local name=$1 port=$2 admin=$3 salt=$4 hold=$5 peers=$6 line=$7
    shift 7
    {
        echo "listen = \"127.0.0.1:$port\""
        echo "admin = \"127.0.0.1:$admin\""
        echo "threads = 1"
        echo "[priority]"
        echo "caller_key_header = \"x-user\""
        echo "[priority.cohorts]"
        echo "salt = $salt"
        # As the simulator's fleet arms: no wait bound, so that PIE cuts by rank (with the
        # default bound the gates turn arrivals away as "queue full" whatever their tier).
        echo "[gate.queue]"
        echo "wait_bound = inf"
        echo "[gate.regulator.pie]"
        echo "callers_hold_back = $hold"
        # At the edge, whose gates each see about 100 arrivals a second and serve 33 after B's
        # slowdown, fewer than one dequeue per PIE update: the line at the share they shed
        # rather than at PIE's noisy `p` alone, which leaves most of the cut to the queue's
        # timeout (docs/experiments/chain-lab.md, "A line at the shed share").
        [[ $line == off ]] || echo "line_at_shed_share = \"${line%+peers}\""
        [[ $line == *+peers ]] && echo "line_at_peers = true"
        # Where to share what (docs/peers.md): at the edge, whose gates draw the line between
        # the users served and those shed, the limit and the drop ratio at the defaults;
        # behind it, where the callers honour the cut-off, the limit halfway and no ratio (a
        # ratio shared by a callee's gates moves all their cut-offs at once).
        case $peers in
            edge) echo "[peers]" ;;
            behind) printf '[peers]\nlimit_weight = 0.5\nratio_weight = 0\n' ;;
        esac
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

# limits PORT...: for each origin of a hop, the least and the greatest limit in force over
# the gates in front of it, one in each proxy whose admin listener is on a PORT (the proxies
# pull a gate toward the mean its own origin says, so the limits agree origin by origin).
limits() {
    local port spreads
    spreads=$(for port in "$@"; do curl -fsS "http://127.0.0.1:$port/metrics"; done |
        awk -F'[{}]' '/^tidegate_limit\{/ {
                 g = $2; v = $3 + 0
                 if (!(g in lo) || v < lo[g]) lo[g] = v
                 if (!(g in hi) || v > hi[g]) hi[g] = v
             }
             END { for (g in lo) printf "%s %g-%g\n", g, lo[g], hi[g] }' |
        sort | awk '{ print $2 }' | paste -sd' ')
    echo "${spreads:-none}"
}

# sample_gates FILE PORT...: every 150 ms until killed, appends to FILE what the gates of the
# proxies whose admin listeners are on the PORTs say of their regulators, queues and refusals,
# each line "unix-time port series value" (a busy machine answers at its own pace).
sample_gates() {
    local file=$1 port now
    shift
    while :; do
        now=$(date +%s.%N)
        for port in "$@"; do
            curl -fsS --max-time 1 "http://127.0.0.1:$port/metrics" 2>/dev/null |
                grep -E '^tidegate_(reject_ratio|queue_length|queue_oldest_wait_seconds)\{|^tidegate_requests_total\{.*outcome="(expired|rejected_regulator)"' |
                sed "s/^/$now $port /" || true
        done >>"$file"
        sleep 0.15
    done
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
    local ignore=() retry=budget salted=0 hold=true edge=edge behind=behind origin_peers=(--peers)
    local line=4s+peers
    [[ $arm == "no peers" ]] && edge=off behind=off origin_peers=()
    [[ $arm == "no feedback" ]] && ignore=(--ignore-cutoff) hold=false
    [[ $arm == "naive retries" ]] && retry=naive
    [[ $arm == "no shared salt" ]] && salted=1
    [[ $arm == "no shed-share line" ]] && line=off
    [[ $arm == "no peers' line" ]] && line=4s
    local b_origins=() b_proxies=() b_admins=() a_origins=() a_proxies=() a_admins=()
    pids=()
    for i in 0 1 2; do
        b_origins+=($((base + i)))
        start_origin "b-origin-$i" "${b_origins[i]}" --workers "$workers" --work "${work_ms}ms" \
            --change "${drop}s:work=$((2 * work_ms))ms" --seed $((i + 1)) "${origin_peers[@]}"
    done
    for i in 0 1 2; do
        b_proxies+=($((base + 10 + i)))
        b_admins+=($((base + 20 + i)))
        start_proxy "b-proxy-$i" "${b_proxies[i]}" "${b_admins[i]}" 0 "$hold" "$behind" off \
            "${b_origins[@]}"
    done
    for i in 0 1 2; do
        a_origins+=($((base + 30 + i)))
        # Each A origin calls all of B's proxies, round-robin (starting at its own), and holds
        # the deepest cut-off any of them said: the same one at every A origin.
        local calls_to=() j
        for j in 0 1 2; do
            calls_to+=("http://127.0.0.1:${b_proxies[(i + j) % 3]}/")
        done
        start_origin "a-origin-$i" "${a_origins[i]}" --workers 16 --work 1ms --seed $((i + 11)) \
            --call "$(IFS=,; echo "${calls_to[*]}")" "${ignore[@]}" "${origin_peers[@]}"
    done
    for i in 0 1 2; do
        a_proxies+=($((base + 40 + i)))
        a_admins+=($((base + 50 + i)))
        start_proxy "a-proxy-$i" "${a_proxies[i]}" "${a_admins[i]}" $((salted * (i + 1))) false \
            "$edge" "$line" "${a_origins[@]}"
    done
    for port in "${b_origins[@]}" "${b_proxies[@]}" "${a_origins[@]}" "${a_proxies[@]}"; do
        wait_port "$port"
    done
    sample_gates "$work/gates.txt" "${a_admins[@]}" &
    pids+=($!)
    local loads=()
    for i in 0 1 2; do
        "$tidegate" load "http://127.0.0.1:${a_proxies[$i]}/" --rate "$rate_per_client" \
            --duration "${duration}s" --arrivals poisson --timeout 1s --seed $((i + 21)) \
            --tiers 0:10,1:10,2:20,3:20,4:20,5:20 --cohort-keys 600 --key-header x-user \
            --tier-by-key --retry "$retry" --attempt-log "$work/attempts-$i.csv" \
            --json >"$work/load-$i.json" 2>"$work/load-$i.log" &
        loads+=($!)
    done
    sleep "$measure_from"
    # The window opens halfway through the first scrape (on a busy machine it takes a while)
    # and closes when the loads have ended, their last requests answered.
    local t0 t1 a_limits b_limits
    t0=$(date +%s.%N)
    read -r ok0 held0 failed0 <<<"$(calls "${a_origins[@]}")"
    a_limits=$(limits "${a_admins[@]}")
    b_limits=$(limits "${b_admins[@]}")
    t0=$(python3 -c "print(($t0 + $(date +%s.%N)) / 2)")
    for pid in "${loads[@]}"; do wait "$pid"; done
    t1=$(date +%s.%N)
    read -r ok1 held1 failed1 <<<"$(calls "${a_origins[@]}")"
    stop_started
    python3 - "$arm" "$t0" "$t1" "$capacity_after" "$((ok1 - ok0))" "$((held1 - held0))" \
        "$((failed1 - failed0))" "$work" "$a_limits" "$b_limits" <<'EOF'
import csv, json, re, statistics, sys
from collections import Counter, defaultdict
arm, t0, t1, capacity, ok, held, failed = sys.argv[1], *map(float, sys.argv[2:8])
work, a_limits, b_limits = sys.argv[8:11]
window = t1 - t0
# A's gates in the window: the gauges' samples, and each gate's refusal counters (summed over
# tiers) at its first and last sample.
gauges = defaultdict(list)
counted = defaultdict(lambda: defaultdict(float))
for line in open(f"{work}/gates.txt"):
    at, port, series, value = line.split()
    if not t0 <= float(at) < t1:
        continue
    name = series.split("{")[0]
    gate = (port, re.search(r'gate="([^"]*)"', series).group(1))
    if name == "tidegate_requests_total":
        outcome = re.search(r'outcome="([^"]*)"', series).group(1)
        counted[(gate, outcome)][float(at)] += float(value)
    else:
        gauges[name].append(float(value))
def per_gate_second(outcome):
    rates = [(c[max(c)] - c[min(c)]) / (max(c) - min(c))
             for (gate, o), c in counted.items() if o == outcome and max(c) > min(c)]
    return statistics.fmean(rates) if rates else 0.0
def median(name, scale=1.0):
    return statistics.median(gauges[name]) * scale if gauges[name] else 0.0
gates = (f"p {median('tidegate_reject_ratio'):.2f}, queue {median('tidegate_queue_length'):.0f}, "
         f"oldest {median('tidegate_queue_oldest_wait_seconds', 1000):.0f} ms; "
         f"{per_gate_second('expired'):.0f} expired / {per_gate_second('rejected_regulator'):.0f} regulator")
important = [0, 0]
# Per second and key: the loads (each sending to one A proxy) that saw it, that shed it.
seen, shed = defaultdict(set), defaultdict(set)
# Per second and key, why it was shed (the `tidegate-shed` reasons).
reasons = defaultdict(Counter)
attempts = defaultdict(int)
# Per tier and key: requests sent in the window, and shed.
by_key = defaultdict(lambda: [0, 0])
for load in range(3):
    for tier in json.load(open(f"{work}/load-{load}.json"))["tiers"]:
        if tier["tier"] <= 1:
            important[0] += tier["offered"]
            important[1] += tier["ok"]
    rows = list(csv.DictReader(open(f"{work}/attempts-{load}.csv")))
    first = {r["intended_s"]: float(r["sent_unix_s"]) for r in rows if r["attempt"] == "1"}
    for row in rows:
        sent = float(row["sent_unix_s"])
        if t0 <= sent < t1:
            second = (int(sent), row["key"])
            seen[second].add(load)
            by_key[(int(row["tier"]), row["key"])][0] += 1
            by_key[(int(row["tier"]), row["key"])][1] += bool(row["shed"])
            if row["shed"]:
                shed[second].add(load)
                reasons[second][row["shed"]] += 1
        # A request counts, with all its attempts, if its first attempt left in the window.
        if t0 <= first.get(row["intended_s"], 0) < t1:
            attempts[(load, row["intended_s"])] += 1
somewhere = [k for k, s in shed.items() if len(seen[k]) >= 2]
everywhere = sum(1 for k in somewhere if shed[k] == seen[k])
disagreeing = sum((reasons[k] for k in somewhere if shed[k] != seen[k]), Counter())
why = ", ".join(f"{reason} {n / max(disagreeing.total(), 1):.0%}"
                for reason, n in disagreeing.most_common())
partly = Counter(tier for (tier, _), (sent, shed_n) in by_key.items()
                 if 0.05 < shed_n / sent < 0.95)
keys = Counter(tier for tier, _ in by_key)
sharpness = ", ".join(f"{partly[t]}/{keys[t]}" for t in sorted(keys))
calls = ok + held + failed
goodput = ok / window
print(f"| {arm} | {everywhere / max(len(somewhere), 1):.1%} ({everywhere} of {len(somewhere)}) | "
      f"{(held + failed) / max(calls, 1):.1%} ({held + failed:.0f} of {calls:.0f}: "
      f"{held:.0f} held back, {failed:.0f} failed) | "
      f"{sum(attempts.values()) / max(len(attempts), 1):.2f} | "
      f"{goodput:.0f}/s ({goodput / capacity:.1%}) | "
      f"{important[1] / max(important[0], 1):.1%} | {why or 'none'} | {sharpness} | {a_limits} / {b_limits} | {gates} |")
EOF
}

echo "| arm | cohort agreement | wasted work at A | attempts per request | chain goodput (of ${capacity_after}/s) | tiers 0-1 served | disagreeing sheds by reason | keys shed in part, tiers 0-5 | limits by origin at A / B | A's gates: medians; a gate-second |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for arm in "${arms[@]}"; do
    run_arm "$arm"
done
