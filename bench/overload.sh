#!/usr/bin/env bash
# The proxy-bound overload: a fast origin, offered 2x, 5x and 10x what the proxy forwards, open
# loop, each proxy given the same small share of one core so that the other core's load
# generator can offer ten times its capacity.
#
#   bench/overload.sh [SECONDS] [NICENESS] [BEFORE]   (default: 10 s per point, nice 19)
#
# The handicap: each proxy runs pinned to the last core (taskset), one worker thread, at nice
# NICENESS beside a CPU hog at nice 0 on the same core; the origin (nginx `return 200`) and
# `tidegate load` run on the other core. Rows:
#
# - tidegate: the default gate, no self-protection.
# - tidegate-max-conn-32: the same with `connections.max = 32` (a connection past 32 open is
#   closed at once, before any read).
# - tidegate-wait-32: the default gate with `connections.max = 32`, `at_max = "wait"` and a
#   backlog of 32 (past 32 open, nothing is accepted: new connections wait in a short
#   backlog, and past it the kernel drops their handshakes). The gate's limit does not bind
#   while the proxy's own delays hold its slots longer than the origin does.
# - tidegate-wait-32-nogate: the same with the gate out of the way (a fixed limit of 100,000,
#   no regulator): what the bound on connections does alone.
# - nginx-limit-conn-N: nginx proxying with `limit_conn` N per server (N = 4 and 32).
# - tidegate-wait-32-before: with BEFORE (another tidegate binary, say the build before a
#   change), its tidegate-wait-32 row, run right after this build's, for a comparison in one
#   run.
#
# For each proxy: its maximum (wrk, closed loop, 2 s) under the handicap, then `tidegate load`
# at half of tidegate's maximum (the unloaded p99) and at 2, 5 and 10 times it, SECONDS each,
# timeout 2 s. Prints per point the offered rate, successes per second and their share of the
# proxy's maximum, the successes' p50 and p99, the sheds, the refusals' p50 and p99 (answers
# with a status other than 2xx or 3xx, timed like the successes; a connect refused or a
# handshake the kernel dropped is no answer: it counts as an error or a timeout, untimed), and
# the timeouts, errors and requests not sent (max 10,000 in flight). A benchmark, not a test.
set -euo pipefail

secs="${1:-10}"
niceness="${2:-19}"
before="${3:-}"
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
bench_start overload
install_tools nginx wrk
build_tidegate
place_cpus

origin_port=18680 tg_port=18681 tg_admin=18691
conn4_port=18683 conn32_port=18684 max_port=18685 max_admin=18695
wait_port=18687 wait_admin=18697
waitng_port=18688 waitng_admin=18698
before_port=18689 before_admin=18699

# The proxies run handicapped: at nice $niceness beside a CPU hog on their core.
handicap "$niceness"

hello_origin "$work/origin" "$origin_port"
for n in 4 32; do
    port_var="conn${n}_port"
    nginx_conf "$work/conn$n" "limit_conn_zone \$server_name zone=slots$n:1m;
    upstream origin { server 127.0.0.1:$origin_port; keepalive 128; }
    server { listen 127.0.0.1:${!port_var}; server_name bench; location / {
        limit_conn slots$n $n;
        proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ''; } }"
done
cat >"$work/max.toml" <<CONF
[connections]
max = 32
CONF
cat >"$work/wait.toml" <<CONF
[connections]
max = 32
at_max = "wait"
backlog = 32
CONF
cp "$work/wait.toml" "$work/waitng.toml"
printf '[gate.limit]\nalgorithm = "fixed"\n[gate.limit.fixed]\nlimit = 100000\n[gate.regulator]\nalgorithm = "off"\n' >>"$work/waitng.toml"

"${rest_cpu[@]}" nginx -p "$work/origin" -c "$work/origin/nginx.conf" & pids+=($!)
# tidegate_row NAME PORT ADMIN_PORT [ARGS...]: a handicapped tidegate proxy in front of the
# origin, with ARGS (its config), its log in $work/NAME.log.
tidegate_row() {
    local name=$1 port=$2 admin=$3
    shift 3
    tidegate_binary_row "$tidegate" "$name" "$port" "$admin" "$@"
}
# tidegate_binary_row BINARY NAME PORT ADMIN_PORT [ARGS...]: the same with another binary.
tidegate_binary_row() {
    local binary=$1 name=$2 port=$3 admin=$4
    shift 4
    "${handicapped[@]}" "$binary" proxy "$@" --upstream "http://127.0.0.1:$origin_port" \
        --listen "127.0.0.1:$port" --admin "127.0.0.1:$admin" --threads 1 \
        >"$work/$name.log" 2>&1 & pids+=($!)
}
tidegate_row tg "$tg_port" "$tg_admin"
tidegate_row max "$max_port" "$max_admin" --config "$work/max.toml"
tidegate_row wait "$wait_port" "$wait_admin" --config "$work/wait.toml"
tidegate_row waitng "$waitng_port" "$waitng_admin" --config "$work/waitng.toml"
before_row=()
if [[ -n $before ]]; then
    tidegate_binary_row "$before" before "$before_port" "$before_admin" --config "$work/wait.toml"
    wait_port "$before_port"
    before_row=("tidegate-wait-32-before $before_port")
fi
"${handicapped[@]}" nginx -p "$work/conn4" -c "$work/conn4/nginx.conf" & pids+=($!)
"${handicapped[@]}" nginx -p "$work/conn32" -c "$work/conn32/nginx.conf" & pids+=($!)
for port in $origin_port $tg_port $max_port $wait_port $waitng_port $conn4_port $conn32_port; do wait_port "$port"; done

# max_rate PORT: requests per second wrk gets through the proxy on PORT, closed loop.
max_rate() {
    "${rest_cpu[@]}" wrk -t1 -c20 -d2s "http://127.0.0.1:$1/" >/dev/null
    "${rest_cpu[@]}" wrk -t1 -c20 -d2s "http://127.0.0.1:$1/" |
        awk '/^Requests\/sec:/ { printf "%.0f", $2 }'
}

# point NAME PORT MAX RATE: one open-loop run at RATE; prints a table row.
point() {
    local name=$1 port=$2 max=$3 rate=$4 json
    json="$work/$name-$rate.json"
    "${rest_cpu[@]}" "$tidegate" load "http://127.0.0.1:$port/" --rate "$rate" \
        --duration "${secs}s" --timeout 2s --json --progress never >"$json" || true
    python3 - "$json" "$name" "$rate" "$max" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except ValueError:
    print(f"| {sys.argv[2]} | {float(sys.argv[3]):.0f} | 0 | 0.00 | | | | | | all | | |"); sys.exit()
t = (r.get("steady") or {}).get("total") or r["total"]
secs = (r.get("steady") or {}).get("seconds") or r["run"]["duration_s"]
name, rate, peak = sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
ok = t["ok"] / secs
lat, ref = t["latency_ms"], t["refused_latency_ms"]
refused = f"{ref['p50']:.1f} | {ref['p99']:.1f}" if ref["count"] else "- | -"
print(f"| {name} | {rate:.0f} | {ok:.0f} | {ok / peak:.2f} | {lat['p50']:.1f} | {lat['p99']:.1f} | "
      f"{t['shed'] / secs:.0f} | {refused} | {t['timed_out'] / secs:.0f} | {t['errors'] / secs:.0f} | {t['not_sent'] / secs:.0f} |")
PY
}

tg_max=$(max_rate $tg_port)
echo "handicap: nice $niceness beside a nice-0 hog on core $(($(nproc) - 1)), one worker each; $(nproc) cores; load: $(uptime | sed 's/.*load average: //')"
echo "| row | offered/s | ok/s | ok / max | p50 ms | p99 ms | shed/s | refused p50 ms | refused p99 ms | timed out/s | errors/s | not sent/s |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for row in "tidegate $tg_port" \
    "tidegate-max-conn-32 $max_port" "tidegate-wait-32 $wait_port" \
    "${before_row[@]}" \
    "tidegate-wait-32-nogate $waitng_port" \
    "nginx-limit-conn-4 $conn4_port" \
    "nginx-limit-conn-32 $conn32_port"; do
    read -r name port <<<"$row"
    max=$(max_rate "$port")
    echo "| $name: max (wrk -c20, closed loop) | | $max | 1.00 | | | | | | | | |"
    for mult in 0.5 2 5 10; do
        point "$name" "$port" "$max" "$(awk -v m="$tg_max" -v x="$mult" 'BEGIN { printf "%.0f", m * x }')"
    done
done
echo "offered: multiples 0.5, 2, 5, 10 of tidegate's max ($tg_max/s); ok / max: of the row's own max; load after: $(uptime | sed 's/.*load average: //')"
