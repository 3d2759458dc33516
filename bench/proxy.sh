#!/usr/bin/env bash
# tidegate's reverse proxy against nginx and haproxy, each with one worker thread, in front of
# the same origin on loopback.
#
#   bench/proxy.sh [SECONDS] [CONNECTIONS]       (default: 10 s, 50 connections)
#
# The origin is nginx (one worker) answering a 13-byte body from memory. wrk (one thread,
# keep-alive) drives each row: direct to the origin, then through tidegate (its default
# adaptive gate: Autotune limit + PIE), the same with its gate out of the way (tg-nogate),
# nginx as a reverse proxy and haproxy; then tidegate and nginx terminating TLS (an ECDSA P-256
# certificate made by openssl for the run), over kept-alive connections (tls) and with a new
# connection, so a full handshake, for every request (tlsnew); and, to tell the handshake from
# the rest of a new connection, tg-nogate and nginx with a new plain connection for every
# request (new). On a machine with
# two cores or more, the proxy under test runs on its own core (taskset) and the origin and wrk
# share the others. Prints req/s, p50 and p99, the CPU the proxy used, and each proxy's req/s
# and req/s per core of CPU relative to nginx's. On a small machine the origin and wrk can be
# the bottleneck rather than the proxy; the per-core column is then the fair comparison.
# Installs nginx-light, haproxy, wrk and openssl from Debian's packages when missing. This is a
# benchmark, not a test: compare the rows of one run, on a machine as quiet as you can find.
set -euo pipefail

secs="${1:-10}"
conns="${2:-50}"
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
bench_start proxy

install_tools nginx haproxy wrk openssl

build_tidegate

place_cpus

origin_port=18080 tidegate_port=18081 tidegate_admin=18091 nginx_port=18082 haproxy_port=18083
bare_port=18084 bare_admin=18094 tls_port=18085 tls_admin=18095 nginx_tls_port=18086

hello_origin "$work/origin" "$origin_port"
nginx_proxy "$work/peer" "$nginx_port" "$origin_port"
cat >"$work/haproxy.cfg" <<CONF
global
    nbthread 1
    maxconn 4096
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    http-reuse always
frontend bench
    bind 127.0.0.1:$haproxy_port
    default_backend origin
backend origin
    server origin 127.0.0.1:$origin_port
CONF

"${rest_cpu[@]}" nginx -p "$work/origin" -c "$work/origin/nginx.conf" & pids+=($!)
origin_pid=$!
"${proxy_cpu[@]}" "$tidegate" proxy --upstream "http://127.0.0.1:$origin_port" \
    --listen "127.0.0.1:$tidegate_port" --admin "127.0.0.1:$tidegate_admin" --threads 1 \
    >"$work/tidegate.log" 2>&1 & pids+=($!)
tidegate_pid=$!
# The same proxy with its gate out of the way (a fixed limit of 100,000, no regulator): the
# difference between the two tidegate rows is what the adaptive gate costs.
printf '[gate.limit]\nalgorithm = "fixed"\n[gate.limit.fixed]\nlimit = 100000\n[gate.regulator]\nalgorithm = "off"\n' >"$work/bare.toml"
"${proxy_cpu[@]}" "$tidegate" proxy --config "$work/bare.toml" --upstream "http://127.0.0.1:$origin_port" \
    --listen "127.0.0.1:$bare_port" --admin "127.0.0.1:$bare_admin" --threads 1 \
    >"$work/bare.log" 2>&1 & pids+=($!)
bare_pid=$!
# TLS: the same certificate for both, and both keep TLS 1.3's default key exchange. tidegate's
# gate is out of the way as in tg-nogate: these rows measure what TLS costs, and the adaptive
# gate, in front of an origin this fast, turns part of a closed loop of 50 connections away
# (its queue's wait bound), which would make its rows cheaper, not comparable.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
    -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
{ cat "$work/bare.toml"; printf '[tls]\ncertificate = "%s"\nkey = "%s"\n' "$work/cert.pem" "$work/key.pem"; } >"$work/tls.toml"
"${proxy_cpu[@]}" "$tidegate" proxy --config "$work/tls.toml" --upstream "http://127.0.0.1:$origin_port" \
    --listen "127.0.0.1:$tls_port" --admin "127.0.0.1:$tls_admin" --threads 1 \
    >"$work/tls.log" 2>&1 & pids+=($!)
tls_pid=$!
nginx_conf "$work/peer-tls" "upstream origin { server 127.0.0.1:$origin_port; keepalive 128; }
    server { listen 127.0.0.1:$nginx_tls_port ssl;
        ssl_certificate $work/cert.pem; ssl_certificate_key $work/key.pem;
        location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ''; } }"
"${proxy_cpu[@]}" nginx -p "$work/peer-tls" -c "$work/peer-tls/nginx.conf" & pids+=($!)
nginx_tls_pid=$!
"${proxy_cpu[@]}" nginx -p "$work/peer" -c "$work/peer/nginx.conf" & pids+=($!)
nginx_pid=$!
"${proxy_cpu[@]}" haproxy -q -db -f "$work/haproxy.cfg" & pids+=($!)
haproxy_pid=$!
for port in $origin_port $tidegate_port $bare_port $nginx_port $haproxy_port $tls_port $nginx_tls_port; do
    wait_port "$port"
done

run() { # NAME PORT PID (the process whose CPU time is charged to the row) [SCHEME [WRK ARG...]]
    local url="${4:-http}://127.0.0.1:$2/" extra=("${@:5}")
    # A short warm-up fills the proxies' connection pools and lets the gate's limit settle.
    "${rest_cpu[@]}" wrk -t1 -c"$conns" -d2s "${extra[@]}" "$url" >/dev/null
    local before after
    before=$(cpu_ticks "$3")
    "${rest_cpu[@]}" wrk -t1 -c"$conns" -d"${secs}s" --latency "${extra[@]}" "$url" >"$work/$1.wrk"
    after=$(cpu_ticks "$3")
    local rps p50 p99 errors cpu
    rps=$(awk '/^Requests\/sec:/ { print $2 }' "$work/$1.wrk")
    p50=$(awk '$1 == "50%" { print $2 }' "$work/$1.wrk" | to_ms)
    p99=$(awk '$1 == "99%" { print $2 }' "$work/$1.wrk" | to_ms)
    errors=$(awk '/Non-2xx|Socket errors/ { sub(/^ +/, ""); printf "%s; ", $0 }' "$work/$1.wrk")
    # The share of one core the process used during the run.
    cpu=$(awk -v t="$((after - before))" -v hz="$(getconf CLK_TCK)" -v s="$secs" 'BEGIN { printf "%.3f", t / hz / s }')
    echo "$1 $rps $p50 $p99 $cpu ${errors:-none}" >>"$work/results"
}

run direct $origin_port $origin_pid
run tidegate $tidegate_port $tidegate_pid
run tg-nogate $bare_port $bare_pid
run nginx $nginx_port $nginx_pid
run haproxy $haproxy_port $haproxy_pid
run tidegate-tls $tls_port $tls_pid https
run nginx-tls $nginx_tls_port $nginx_tls_pid https
# wrk opens a new connection after each answer to `Connection: close`, with a full handshake
# (it resumes no session).
run tidegate-tlsnew $tls_port $tls_pid https -H "Connection: close"
run nginx-tlsnew $nginx_tls_port $nginx_tls_pid https -H "Connection: close"
run tg-nogate-new $bare_port $bare_pid http -H "Connection: close"
run nginx-new $nginx_port $nginx_pid http -H "Connection: close"

echo "wrk -t1 -c$conns -d${secs}s, one worker thread per proxy, $(nproc) cores"
echo "cpu: the share of a core the proxy (for direct: the origin) used; req/s per core: req/s / cpu,"
echo "what one worker thread of it would serve if it were the bottleneck. x nginx compares both,"
echo "with nginx's row of the same kind (-tls, -tlsnew, -new: nginx-tls, nginx-tlsnew, nginx-new)."
awk 'function kind(row) { return match(row, /-(tls|tlsnew|new)$/) ? substr(row, RSTART) : "" }
     NR == FNR { if ($1 ~ /^nginx/) { base[kind($1)] = $2; base_core[kind($1)] = $2 / $5 } next }
     FNR == 1 { printf "| %-8s | %9s | %7s | %7s | %5s | %12s | %14s | %s\n", "row", "req/s", "p50 ms", "p99 ms", "cpu", "req/s per core", "x nginx (req/s, per core)", "errors";
                printf "|---|---:|---:|---:|---:|---:|---:|---|\n" }
     { core = ($5 > 0) ? $2 / $5 : 0;
       k = kind($1);
       ratio = ($1 == "direct") ? "-" : sprintf("%.2f, %.2f", $2 / base[k], core / base_core[k]);
       printf "| %-8s | %9.0f | %7.2f | %7.2f | %5.2f | %12.0f | %14s | ", $1, $2, $3, $4, $5, core, ratio;
       $1 = $2 = $3 = $4 = $5 = ""; sub(/^ +/, ""); print }' "$work/results" "$work/results"
if grep -q "limit" <(curl -sf "http://127.0.0.1:$tidegate_admin/status" 2>/dev/null || true); then
    echo "tidegate /status after the run:"
    curl -sf "http://127.0.0.1:$tidegate_admin/status"
    echo
fi
