#!/usr/bin/env bash
# Where the bounded proxy's share of its core goes in the proxy-bound overload: overload.sh's
# tidegate-wait-32 row (default gate, `connections.max = 32`, `at_max = "wait"`, backlog 32),
# under the same handicap (one worker pinned to the last core at nice NICENESS beside a nice-0
# CPU hog; the origin and the load on the other core), at five points:
#
# - keepalive: wrk -t1 -c20, closed loop on kept-alive connections (how overload.sh measures
#   a row's maximum);
# - close: the same with `Connection: close`, a new connection per request;
# - 0.5x, 1x, 5x, 10x: `tidegate load`, open loop, timeout 2 s, at those multiples of the
#   keepalive point's rate (as overload.sh offers them).
#
#   bench/overload_profile.sh [SECONDS] [NICENESS] [BINARY]   (default: 8 s, nice 15, this build)
#
# Each point runs three times, SECONDS each: plain, for the rates, the proxy's CPU time per
# forwarded request (from /proc) and its /metrics counters; under `perf record -g`, for the
# share of its samples per library and function; under `strace -c -f`, for its system calls
# per forwarded request (strace slows the proxy several times: only the counts per request
# mean anything). "Forwarded" is the proxy's own count of requests answered ok by the origin
# (`tidegate_request_duration_seconds_count{class="ok"}`). The kernel's listen-queue
# overflows (`TcpExt: ListenOverflows`, the whole machine's) count the handshakes dropped past
# the backlog. Installs nginx-light, wrk, strace and linux-perf when missing. A benchmark,
# not a test.
set -euo pipefail

secs="${1:-8}"
niceness="${2:-15}"
binary="${3:-}"
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
bench_start overload-profile
install_tools nginx wrk strace
command -v perf >/dev/null || apt_install linux-perf
if [[ -n $binary ]]; then tidegate=$binary; else build_tidegate; fi
place_cpus

origin_port=18780 port=18781 admin=18791
handicap "$niceness"
hello_origin "$work/origin" "$origin_port"
"${rest_cpu[@]}" nginx -p "$work/origin" -c "$work/origin/nginx.conf" & pids+=($!)
printf '[connections]\nmax = 32\nat_max = "wait"\nbacklog = 32\n' >"$work/wait.toml"
"${handicapped[@]}" "$tidegate" proxy --config "$work/wait.toml" \
    --upstream "http://127.0.0.1:$origin_port" --listen "127.0.0.1:$port" \
    --admin "127.0.0.1:$admin" --threads 1 >"$work/proxy.log" 2>&1 & pids+=($!)
proxy_pid=$!
wait_port $origin_port
wait_port $port

# counters FILE: the proxy's nonzero counters, "name{labels} value" a line, and the kernel's
# listen overflows, into FILE.
counters() {
    curl -s "http://127.0.0.1:$admin/metrics" |
        awk '/^tidegate_(request_duration_seconds_count|requests_total|client_connections_closed_total)/ && $2 > 0' >"$1"
    awk '/^TcpExt:/ { if (!h) { split($0, k); h = 1 } else { for (i = 2; i <= NF; i++) if (k[i] == "ListenOverflows") print "ListenOverflows", $i } }' \
        /proc/net/netstat >>"$1"
}
# forwarded BEFORE AFTER: the requests the proxy forwarded between two counters files.
forwarded() {
    awk '/class="ok"/ { v[FILENAME] += $2 } END { print v[ARGV[2]] - v[ARGV[1]] }' "$1" "$2"
}

# drive POINT RATE: the load of one point for SECONDS (RATE: the open loop's, requests/s).
drive() {
    case $1 in
    keepalive) "${rest_cpu[@]}" wrk -t1 -c20 -d"${secs}s" "http://127.0.0.1:$port/" ;;
    close) "${rest_cpu[@]}" wrk -t1 -c20 -d"${secs}s" -H 'Connection: close' "http://127.0.0.1:$port/" ;;
    *) "${rest_cpu[@]}" "$tidegate" load "http://127.0.0.1:$port/" --rate "$2" \
        --duration "${secs}s" --timeout 2s --json --progress never ;;
    esac
}

# settle: until the proxy has no connection open (the previous point's timeouts drained).
settle() {
    for _ in $(seq 50); do
        [[ $(curl -s "http://127.0.0.1:$admin/metrics" | awk '$1 == "tidegate_client_connections" { print $2 }') == 0 ]] && return
        sleep 0.1
    done
}

"${rest_cpu[@]}" wrk -t1 -c20 -d2s "http://127.0.0.1:$port/" >/dev/null # warm-up
max=$("${rest_cpu[@]}" wrk -t1 -c20 -d2s "http://127.0.0.1:$port/" | awk '/^Requests\/sec:/ { printf "%.0f", $2 }')
hz=$(getconf CLK_TCK)
echo "handicap: nice $niceness beside a nice-0 hog on core $(($(nproc) - 1)); keep-alive max $max/s; load: $(uptime | sed 's/.*load average: //')"
for point in keepalive close 0.5x 1x 5x 10x; do
    rate=$(awk -v m="$max" -v x="${point%x}" 'BEGIN { printf "%.0f", m * x }')
    settle
    # Plain: rates, CPU, counters.
    counters "$work/c0"
    read -r u0 s0 < <(awk '{ print $14, $15 }' "/proc/$proxy_pid/stat")
    drive "$point" "$rate" >"$work/$point.out"
    read -r u1 s1 < <(awk '{ print $14, $15 }' "/proc/$proxy_pid/stat")
    counters "$work/c1"
    n=$(forwarded "$work/c0" "$work/c1")
    echo
    echo "== $point$([[ $point == *x ]] && echo " (open loop, $rate/s offered)"): forwarded $((n / secs))/s," \
        "proxy CPU $(awk -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v hz="$hz" -v t="$secs" -v n="$n" \
            'BEGIN { printf "%.1f%% of the core (user %.0f%%), %.0f us per forwarded request", 100 * (u + s) / hz / t, 100 * u / (u + s + 1e-9), 1e6 * (u + s) / hz / (n + 1e-9) }')"
    if [[ $point == *x ]]; then
        python3 - "$work/$point.out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t, s = r["total"], r["run"]["duration_s"]
print(f"  load: ok {t['ok'] / s:.0f}/s, shed {t['shed'] / s:.0f}/s, timed out {t['timed_out'] / s:.0f}/s, "
      f"errors {t['errors'] / s:.0f}/s {r['errors']}, not sent {t['not_sent'] / s:.0f}/s; "
      f"{r['connections_opened'] / s:.0f} connections opened/s ({r['connections_opened'] / max(t['sent'], 1):.2f} per request sent)")
PY
    fi
    echo "  counters over the run (per forwarded request):"
    join -a2 -e0 -o 0,1.2,2.2 <(sort "$work/c0") <(sort "$work/c1") |
        awk -v n="$n" '$3 - $2 > 0 { printf "    %-100s %8d  %.3f\n", $1, $3 - $2, ($3 - $2) / (n + 1e-9) }'

    settle
    counters "$work/c0"
    perf record -q -g -p "$proxy_pid" -o "$work/$point.perf" -- sleep "$secs" 2>/dev/null &
    tracer=$!
    drive "$point" "$rate" >/dev/null
    wait "$tracer" || true
    echo "  perf: where the proxy's samples go (self, by library; then the top functions):"
    perf report -q -i "$work/$point.perf" --no-children --sort dso --stdio 2>/dev/null |
        awk 'NF && $1 ~ /%$/ && n++ < 6 { printf "    %s\n", $0 }'
    perf report -q -i "$work/$point.perf" --no-children --sort dso,symbol --stdio -g none 2>/dev/null |
        awk 'NF && $1 ~ /%$/ && n++ < 25 { printf "    %s\n", substr($0, 1, 140) }'

    settle
    counters "$work/c0"
    strace -c -f -p "$proxy_pid" -o "$work/$point.strace" &
    tracer=$!
    sleep 0.5 # until attached
    drive "$point" "$rate" >/dev/null
    kill -INT "$tracer"
    wait "$tracer" || true
    counters "$work/c1"
    n=$(forwarded "$work/c0" "$work/c1")
    echo "  strace: system calls per forwarded request ($n forwarded while traced):"
    awk -v n="$n" '$NF != "total" && $4 ~ /^[0-9]+$/ { e = ($5 ~ /^[0-9]+$/) ? $5 : 0; printf "    %-14s %7.2f  (errors %.2f)\n", $NF, $4 / (n + 1e-9), e / (n + 1e-9) }' \
        "$work/$point.strace" | sort -k2 -rn | awk 'NR <= 14'
done
echo
echo "load after: $(uptime | sed 's/.*load average: //')"
