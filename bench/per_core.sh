#!/usr/bin/env bash
# Requests per core of tidegate proxy builds, interleaved: the wall-clock companion of
# bench/instructions.sh, for telling two builds apart on a machine whose load drifts.
#
#   bench/per_core.sh ROUNDS SECONDS CONNECTIONS BINARY...
#
# For each round, each BINARY in turn: its `proxy --threads 1` (its default gate) pinned to the
# last core, in front of a one-worker nginx origin answering "hello, world" on the other
# cores, where wrk -t1 with CONNECTIONS warms it up for 1 s and then runs SECONDS. Prints per
# run: round, binary, requests per second, the share of a core the proxy used (its user and
# system time from /proc) and requests per CPU-second. Installs nginx-light and wrk from
# Debian's packages when missing. A benchmark, not a test.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
compared_builds "$@"
bench_start per-core
install_tools nginx wrk
place_cpus

origin_port=18380 proxy_port=18381 admin_port=18391
hello_origin "$work/origin" "$origin_port"
"${rest_cpu[@]}" nginx -c "$work/origin/nginx.conf" -p "$work/origin" & pids+=($!)
wait_port "$origin_port"
ticks=$(getconf CLK_TCK)

# cpu_ticks PID: the user and system time of PID so far, in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

echo "round binary requests_per_s cpu requests_per_core"
for round in $(seq "$rounds"); do
    for binary in "${binaries[@]}"; do
        "${proxy_cpu[@]}" "$binary" proxy --threads 1 --upstream "http://127.0.0.1:$origin_port" \
            --listen "127.0.0.1:$proxy_port" --admin "127.0.0.1:$admin_port" \
            --log-level warn >/dev/null 2>&1 &
        pid=$!
        wait_port "$proxy_port"
        "${rest_cpu[@]}" wrk -t1 -c"$conns" -d1s "http://127.0.0.1:$proxy_port/" >/dev/null
        before=$(cpu_ticks "$pid")
        requests=$("${rest_cpu[@]}" wrk -t1 -c"$conns" -d"${secs}s" "http://127.0.0.1:$proxy_port/" |
            awk '/requests in/ { print $1 }')
        after=$(cpu_ticks "$pid")
        kill "$pid"
        wait "$pid" 2>/dev/null || true
        awk -v round="$round" -v binary="$binary" -v requests="$requests" -v secs="$secs" \
            -v used="$((after - before))" -v ticks="$ticks" 'BEGIN {
                cpu = used / ticks
                printf "%s %s %.0f %.2f %.0f\n", round, binary, requests / secs, cpu / secs, requests / cpu
            }'
    done
done
