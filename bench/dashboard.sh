#!/usr/bin/env bash
# What an open dashboard costs the proxy's data path: the same tidegate proxy (one worker
# thread, default gate) in front of an nginx origin, driven by wrk, in rounds of three runs:
# plain; control, a client polling /healthz once a second; dashboard, a client polling
# /dashboard/data every second as the page does. The sampler and the latency histograms run
# in all three (they always do, so that the page shows the past); the difference is the
# answers to the page. Compare dashboard with control: on a small machine the poller's own
# curl a second, beside wrk and the origin, shows in the p99.
#
#   bench/dashboard.sh [ROUNDS] [SECONDS] [CONNECTIONS]     (default: 4 rounds, 5 s, 32)
#
# Prints each run's req/s, p99 and the proxy's CPU time per request, then the medians of each
# side. The spread between runs of the same side is the noise to compare the difference with.
# Installs nginx-light and wrk from Debian's packages when missing. A benchmark, not a test.
set -euo pipefail

pairs="${1:-4}"
secs="${2:-5}"
conns="${3:-32}"
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/tidegate-dashboard-bench.XXXXXX")"
pids=()
poller=""
cleanup() {
    [[ -n "$poller" ]] && kill "$poller" 2>/dev/null
    stop_started
    rm -rf "$work"
}
trap cleanup EXIT

# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"

install_tools nginx wrk curl

build_tidegate

place_cpus

origin_port=18180 proxy_port=18181 admin_port=18191
hello_origin "$work/origin" "$origin_port"

"${rest_cpu[@]}" nginx -p "$work/origin" -c "$work/origin/nginx.conf" & pids+=($!)
"${proxy_cpu[@]}" "$tidegate" proxy --upstream "http://127.0.0.1:$origin_port" \
    --listen "127.0.0.1:$proxy_port" --admin "127.0.0.1:$admin_port" --threads 1 \
    >"$work/tidegate.log" 2>&1 & pids+=($!)
proxy_pid=$!
wait_port $origin_port
wait_port $proxy_port

# Polls the data endpoint once a second, as the page does, following `since`; or, for the
# control side, /healthz at the same pace: the poller's own cost (a curl a second on the cores
# wrk and the origin share) without the dashboard.
poll_dashboard() { # PATH-BEFORE-SINCE
    local since=0
    while true; do
        since=$(curl -sf "http://127.0.0.1:$admin_port$1$since" |
            sed -n 's/.*"seq":\([0-9]*\).*/\1/p')
        since=${since:-0}
        sleep 1
    done
}

run() { # SIDE: plain, control or dashboard
    if [[ $1 == control ]]; then
        "${rest_cpu[@]}" bash -c "$(declare -f poll_dashboard); admin_port=$admin_port; poll_dashboard '/healthz?'" &
        poller=$!
    fi
    if [[ $1 == dashboard ]]; then
        "${rest_cpu[@]}" bash -c "$(declare -f poll_dashboard); admin_port=$admin_port; poll_dashboard '/dashboard/data?since='" &
        poller=$!
    fi
    local before after
    before=$(cpu_ticks "$proxy_pid")
    "${rest_cpu[@]}" wrk -t1 -c"$conns" -d"${secs}s" --latency "http://127.0.0.1:$proxy_port/" >"$work/run.wrk"
    after=$(cpu_ticks "$proxy_pid")
    if [[ $1 == control ]]; then
        kill "$poller"
        wait "$poller" 2>/dev/null || true
        poller=""
    fi
    if [[ $1 == dashboard ]]; then
        local status
        status=$(curl -sf "http://127.0.0.1:$admin_port/status")
        # What the dashboard held the proxy's one worker for, by its own clock.
        sed -n 's/.*"last_answer_us":\([0-9.e+-]*\).*"last_sample_us":\([0-9.e+-]*\).*/\1 \2/p' \
            <<<"$status" >>"$work/costs"
        kill "$poller"
        wait "$poller" 2>/dev/null || true
        poller=""
    fi
    local requests rps p99 us
    requests=$(awk '/requests in/ { print $1 }' "$work/run.wrk")
    rps=$(awk '/^Requests\/sec:/ { print $2 }' "$work/run.wrk")
    p99=$(awk '$1 == "99%" { print $2 }' "$work/run.wrk" | to_ms)
    us=$(awk -v t="$((after - before))" -v hz="$(getconf CLK_TCK)" -v n="$requests" \
        'BEGIN { printf "%.2f", t / hz / n * 1e6 }')
    printf "| %-9s | %9.0f | %7.2f | %6.2f |\n" "$1" "$rps" "$p99" "$us"
    echo "$1 $rps $p99 $us" >>"$work/results"
}

# Warm-up: fill the pool and let the limit settle.
"${rest_cpu[@]}" wrk -t1 -c"$conns" -d2s "http://127.0.0.1:$proxy_port/" >/dev/null
echo "wrk -t1 -c$conns -d${secs}s, tidegate --threads 1 on its own core, $(nproc) cores; $pairs rounds"
echo "| side      |     req/s |  p99 ms | CPU us/req |"
echo "|---|---:|---:|---:|"
# The order rotates from round to round (plain control dashboard, control dashboard plain,
# dashboard plain control, ...), so that no side always runs first or right after another.
sides=(plain control dashboard)
for round in $(seq 0 $((pairs - 1))); do
    for i in 0 1 2; do
        run "${sides[$(((round + i) % 3))]}"
    done
done
median() { # SIDE COLUMN
    awk -v s="$1" -v c="$2" '$1 == s { print $c }' "$work/results" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
range() { # SIDE COLUMN
    awk -v s="$1" -v c="$2" '$1 == s { print $c }' "$work/results" | sort -g |
        awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s-%s", lo, hi }'
}
for side in plain control dashboard; do
    printf "median %-9s: %s req/s (%s), CPU %s us/req (%s)\n" "$side" \
        "$(median "$side" 2)" "$(range "$side" 2)" "$(median "$side" 4)" "$(range "$side" 4)"
done
# The tail, round by round: the dashboard's p99 against the control's of the same round.
awk '{ side[NR] = $1; p99[NR] = $3 }
     END {
         for (r = 0; r < NR / 3; r++) {
             for (i = 1; i <= 3; i++) { n = 3 * r + i; p[side[n]] = p99[n] }
             d = p["dashboard"] - p["control"]; above += (d > 0); sum += d; sq += d * d
             diffs = diffs sprintf(" %+.2f", d)
         }
         n = NR / 3; mean = sum / n
         se = n > 1 ? sqrt((sq - n * mean * mean) / (n - 1) / n) : 0
         printf "p99 dashboard - control, by round (ms):%s; above in %d of %d rounds\n", diffs, above, n
         printf "mean difference %+.2f ms, standard error %.2f ms\n", mean, se
     }' "$work/results"
awk 'NR == 1 { amin = amax = $1; smin = smax = $2 }
     { if ($1 < amin) amin = $1; if ($1 > amax) amax = $1; if ($2 < smin) smin = $2; if ($2 > smax) smax = $2 }
     END { if (NR) printf "the dashboard by its own clock, at the end of each run: last answer %s-%s us, last sample %s-%s us\n", amin, amax, smin, smax }' "$work/costs"
