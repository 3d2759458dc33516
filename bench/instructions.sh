#!/usr/bin/env bash
# User-space instructions per request of tidegate proxy builds, counted by callgrind: steadier
# than requests per second on a busy machine, so the figure to compare two builds with (what a
# change costs each request).
#
#   bench/instructions.sh ROUNDS SECONDS CONNECTIONS BINARY...
#
# For each round, each BINARY in turn (so that a drift of the machine hits them alike): the
# binary's `proxy --threads 1` (its default gate) under `valgrind --tool=callgrind`, in front of
# a one-worker nginx origin answering "hello, world"; wrk -t1 with CONNECTIONS for 2 s to warm
# it up, the counts zeroed (callgrind_control -z), the same for SECONDS, the counts dumped
# (callgrind_control -d), and the dump's total divided by the requests wrk reports. Prints one
# line per run: round, binary, requests, instructions per request. A BINARY named `nginx` is
# nginx as the reverse proxy instead (bench/lib.sh's `nginx_proxy`, one process, no master), so
# that a run can say how far tidegate's user space is from nginx's. Installs nginx-light, wrk and
# valgrind from Debian's packages when missing. A benchmark, not a test. On a loaded machine
# use one connection: with many, how many requests each wakeup of the proxy serves depends on
# the load, and so does the count per request (by +-20% at 32 connections and a load of 7).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
compared_builds "$@"
bench_start instructions

install_tools nginx wrk valgrind

origin_port=18180 proxy_port=18181 admin_port=18191
hello_origin "$work/origin" "$origin_port"
nginx -c "$work/origin/nginx.conf" -p "$work/origin" &
pids+=($!)
wait_port "$origin_port"

# run ROUND BINARY: one measured run.
run() {
    local out="$work/cg.$1.$(basename "$2")"
    if [[ $2 == nginx ]]; then
        nginx_proxy "$work/proxy" "$proxy_port" "$origin_port"
        valgrind --tool=callgrind --callgrind-out-file="$out.%p" \
            nginx -c "$work/proxy/nginx.conf" -p "$work/proxy" 2>"$out.log" &
    else
        valgrind --tool=callgrind --callgrind-out-file="$out.%p" \
            "$2" proxy --threads 1 --upstream "http://127.0.0.1:$origin_port" \
            --listen "127.0.0.1:$proxy_port" --admin "127.0.0.1:$admin_port" \
            --log-level warn 2>"$out.log" &
    fi
    local pid=$!
    wait_port "$proxy_port"
    wrk -t1 -c"$conns" -d2s "http://127.0.0.1:$proxy_port/" >/dev/null
    callgrind_control -z "$pid" >/dev/null 2>&1
    local requests
    requests=$(wrk -t1 -c"$conns" -d"${secs}s" "http://127.0.0.1:$proxy_port/" |
        awk '/requests in/ { print $1 }')
    callgrind_control -d "$pid" >/dev/null 2>&1
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    # The dump made on request (not the one at exit) is the one with a part number.
    local totals
    totals=$(awk '/^(summary|totals):/ { print $2; exit }' "$out".*.[0-9]*)
    echo "$1 $2 $requests $(awk -v t="$totals" -v r="$requests" 'BEGIN { printf "%.0f", t / r }')"
}

echo "round binary requests instructions_per_request"
for round in $(seq "$rounds"); do
    for binary in "${binaries[@]}"; do
        run "$round" "$binary"
    done
done
