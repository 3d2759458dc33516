#!/usr/bin/env bash
# The shed path: requests turned away per second per core, tidegate's gate against nginx's
# limit_conn and limit_req, beside each proxy's own forward rate, in one run.
#
#   bench/shed.sh [SECONDS] [CONNECTIONS]       (default: 10 s, 50 connections)
#
# Five rows, each proxy with one worker thread on its own core (taskset), wrk (one thread,
# keep-alive, the same settings for every row) and the origins on the other core:
#
# - tg-forward: tidegate (default gate) forwarding to a fast origin (nginx `return 200`).
# - tg-shed: tidegate with a fixed limit of 1 and no queue, whose one slot is held by a
#   request to an origin that never answers (`tidegate origin --work 1h`): every request
#   wrk sends is turned away by the gate (503, Retry-After, `tidegate-shed: queue_full`).
# - nginx-forward: nginx proxying to the fast origin.
# - nginx-limit-conn: nginx with `limit_conn` 1 per server, its one slot held the same way.
# - nginx-limit-req: nginx with `limit_req` at 1 request a minute, no burst.
#
# Prints req/s, p50, p99, the proxy's CPU, req/s per core, the share of non-2xx answers (1.000
# on the refusal rows: every answer a refusal) and, for each refusal row, its rate per core
# against tidegate's forward rate and against tidegate's shed rate. It also checks that a
# refusal leaves the connection open (curl sends two requests on one connection and counts its
# connects). Installs nginx-light and wrk from Debian's packages when missing. A benchmark,
# not a test: compare the rows of one run.
set -euo pipefail

secs="${1:-10}"
conns="${2:-50}"
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
bench_start shed
install_tools nginx wrk curl
build_tidegate

place_cpus

origin_port=18580 slow_port=18585 forward_port=18581 forward_admin=18591 shed_port=18582
shed_admin=18592 nginx_port=18583 conn_port=18584 req_port=18586

hello_origin "$work/origin" "$origin_port"
nginx_proxy "$work/peer" "$nginx_port" "$origin_port"
nginx_conf "$work/conn" "limit_conn_zone \$binary_remote_addr zone=slots:1m;
    server { listen 127.0.0.1:$conn_port; location / {
        limit_conn slots 1;
        proxy_pass http://127.0.0.1:$slow_port; proxy_read_timeout 1h; } }"
nginx_conf "$work/req" "limit_req_zone \$binary_remote_addr zone=rate:1m rate=1r/m;
    upstream origin { server 127.0.0.1:$origin_port; keepalive 128; }
    server { listen 127.0.0.1:$req_port; location / {
        limit_req zone=rate;
        proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ''; } }"
# A limit of one slot, no queue, no regulator: once a request holds the slot, the gate turns
# every other away at once. The upstream timeout outlasts the run, so the slot stays held.
cat >"$work/shed.toml" <<CONF
[client]
timeout = "1h"
[gate.limit]
algorithm = "fixed"
[gate.limit.fixed]
limit = 1
[gate.regulator]
algorithm = "off"
[gate.queue]
capacity = 0
CONF

"${rest_cpu[@]}" nginx -p "$work/origin" -c "$work/origin/nginx.conf" & pids+=($!)
"${rest_cpu[@]}" "$tidegate" origin --listen "127.0.0.1:$slow_port" --workers 2 --work 1h \
    >"$work/slow.log" 2>&1 & pids+=($!)
"${proxy_cpu[@]}" "$tidegate" proxy --upstream "http://127.0.0.1:$origin_port" \
    --listen "127.0.0.1:$forward_port" --admin "127.0.0.1:$forward_admin" --threads 1 \
    >"$work/forward.log" 2>&1 & pids+=($!)
forward_pid=$!
"${proxy_cpu[@]}" "$tidegate" proxy --config "$work/shed.toml" \
    --upstream "http://127.0.0.1:$slow_port" --listen "127.0.0.1:$shed_port" \
    --admin "127.0.0.1:$shed_admin" --threads 1 >"$work/shed.log" 2>&1 & pids+=($!)
shed_pid=$!
"${proxy_cpu[@]}" nginx -p "$work/peer" -c "$work/peer/nginx.conf" & pids+=($!)
nginx_pid=$!
"${proxy_cpu[@]}" nginx -p "$work/conn" -c "$work/conn/nginx.conf" & pids+=($!)
conn_pid=$!
"${proxy_cpu[@]}" nginx -p "$work/req" -c "$work/req/nginx.conf" & pids+=($!)
req_pid=$!
for port in $origin_port $slow_port $forward_port $shed_port $nginx_port $conn_port $req_port; do
    wait_port "$port"
done

# The requests that hold the one slot of tg-shed and nginx-limit-conn for the whole run, and
# the one request limit_req lets through.
curl -s -o /dev/null --max-time 3600 "http://127.0.0.1:$shed_port/hold" & pids+=($!)
curl -s -o /dev/null --max-time 3600 "http://127.0.0.1:$conn_port/hold" & pids+=($!)
curl -s -o /dev/null "http://127.0.0.1:$req_port/first"
sleep 0.5

# kept_alive PORT: whether a refusal leaves its connection open (two requests, one connect).
kept_alive() {
    local connects
    connects=$(curl -s --max-time 5 -o /dev/null -o /dev/null -w '%{num_connects} ' \
        "http://127.0.0.1:$1/a" "http://127.0.0.1:$1/b")
    [[ $connects == "1 0 " ]] && echo yes || echo "no ($connects)"
}
echo "refusals keep the connection open: tg-shed $(kept_alive $shed_port)," \
    "nginx-limit-conn $(kept_alive $conn_port), nginx-limit-req $(kept_alive $req_port)"

results="$work/results"
wrk_row "$results" tg-forward "http://127.0.0.1:$forward_port/" $forward_pid "$secs" "$conns"
wrk_row "$results" tg-shed "http://127.0.0.1:$shed_port/" $shed_pid "$secs" "$conns"
wrk_row "$results" nginx-forward "http://127.0.0.1:$nginx_port/" $nginx_pid "$secs" "$conns"
wrk_row "$results" nginx-limit-conn "http://127.0.0.1:$conn_port/" $conn_pid "$secs" "$conns"
wrk_row "$results" nginx-limit-req "http://127.0.0.1:$req_port/" $req_pid "$secs" "$conns"

echo "wrk -t1 -c$conns -d${secs}s, one worker thread per proxy, $(nproc) cores, load: $(uptime | sed 's/.*load average: //')"
echo "per core: req/s / cpu. x tg-forward, x tg-shed: the row's req/s per core over theirs."
awk 'NR == FNR { core[$1] = ($5 > 0) ? $2 / $5 : 0; next }
     FNR == 1 { printf "| %-16s | %9s | %6s | %6s | %5s | %9s | %7s | %12s | %8s | %s\n", "row", "req/s", "p50 ms", "p99 ms",
                       "cpu", "per core", "non-2xx", "x tg-forward", "x tg-shed", "errors";
                print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|" }
     { c = core[$1];
       printf "| %-16s | %9.0f | %6.2f | %6.2f | %5.2f | %9.0f | %7s | %12.2f | %8.2f | ", $1, $2, $3, $4, $5, c, $6,
              c / core["tg-forward"], c / core["tg-shed"];
       $1 = $2 = $3 = $4 = $5 = $6 = ""; sub(/^ +/, ""); print }' "$results" "$results"
