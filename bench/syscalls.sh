#!/usr/bin/env bash
# System calls per request of tidegate and of nginx as proxies, to tell the kernel's share of
# a proxied request from the proxy's own: each proxy (one worker thread) in front of the same
# nginx origin, driven by wrk while `strace -c` counts its calls; the counts divided by the
# requests wrk completed in that time. strace slows the proxies down several times, so the
# rates here mean nothing: only the counts per request do.
#
#   bench/syscalls.sh [SECONDS] [CONNECTIONS]     (default: 4 s, 50)
#
# Installs nginx-light, wrk and strace from Debian's packages when missing. A benchmark, not
# a test.
set -euo pipefail

secs="${1:-4}"
conns="${2:-50}"
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
bench_start syscalls

install_tools nginx wrk strace

build_tidegate

origin_port=18480 tidegate_port=18481 nginx_port=18482 admin_port=18491
hello_origin "$work/origin" "$origin_port"
nginx_proxy "$work/peer" "$nginx_port" "$origin_port"
nginx -p "$work/origin" -c "$work/origin/nginx.conf" & pids+=($!)
"$tidegate" proxy --upstream "http://127.0.0.1:$origin_port" \
    --listen "127.0.0.1:$tidegate_port" --admin "127.0.0.1:$admin_port" --threads 1 \
    >"$work/tidegate.log" 2>&1 & pids+=($!)
tidegate_pid=$!
nginx -p "$work/peer" -c "$work/peer/nginx.conf" & pids+=($!)
nginx_pid=$!
wait_port $origin_port
wait_port $tidegate_port
wait_port $nginx_port

echo "system calls per request, wrk -t1 -c$conns -d${secs}s under strace -c"
for row in "tidegate $tidegate_pid $tidegate_port" "nginx $nginx_pid $nginx_port"; do
    read -r name pid port <<<"$row"
    wrk -t1 -c"$conns" -d2s "http://127.0.0.1:$port/" >/dev/null # warm-up
    strace -c -f -p "$pid" -o "$work/strace.$name" &
    tracer=$!
    sleep 0.5 # until attached
    wrk -t1 -c"$conns" -d"${secs}s" "http://127.0.0.1:$port/" >"$work/wrk.$name"
    kill -INT "$tracer"
    wait "$tracer" || true
    requests=$(awk '/requests in/ { print $1 }' "$work/wrk.$name")
    echo "$name ($requests requests):"
    awk -v n="$requests" '$NF != "total" && $4 ~ /^[0-9]+$/ { printf "  %-14s %6.3f\n", $NF, $4 / n }' \
        "$work/strace.$name" | sort -k2 -rn | head -8
done
