#!/usr/bin/env bash
# A soak of the proxy under 10x overload with faults on a schedule, reconciled at the end.
#
# An origin (10 workers of 100 ms: 100 requests/s) behind the proxy, and `tidegate load` at 10x that with mixed tiers (0, 1, 3, 5) and caller keys, for DURATION.
# Every PERIOD (default 60 s) the faults come round: the origin hung (SIGSTOP) for 5 s, then
# killed (SIGKILL) and restarted on its port, and a burst of slow clients (request heads never
# finished) opened on the proxy. RSS and open file descriptors of the proxy, and its gate's
# limit, are sampled every second into samples.csv and charted (rss-fds.svg).
#
#   bench/soak.sh [DURATION] [RATE] [PERIOD]     (default: 10m, 1000 requests/s, 60s)
#
# The origin is bench/soak_origin.py (10 workers of 100 ms: 100 requests/s, a queue of 100),
# which counts every request head it reads in a file the moment it reads it: its count is
# exact however it ends. Its kill is a SIGKILL of the origin frozen (SIGSTOP) for half a
# second first: while it is frozen the proxy's slots to it fill and nothing more is sent, so
# the requests it will never read (those still in its sockets' receive queues, one per socket
# with unread bytes, as the proxy does not pipeline) can be counted with ss before it dies;
# the proxy is paused (SIGSTOP) for the instant of the kill itself.
#
# At the end, once the proxy has finished every request, it reconciles, and every difference
# must be 0:
#   - the load generator's requests sent, less those it saw closed without an answer (sent on
#     a kept-alive connection just as the proxy closed it for idling: they never reach the
#     proxy), against the proxy's count of requests (every class of
#     tidegate_request_duration_seconds);
#   - the proxy's two ledgers, the duration histogram's classes against the gate's
#     tidegate_requests_total outcomes;
#   - the requests the proxy forwarded (admitted: ok, dropped, ignored, cancelled in flight;
#     less those whose connection to the origin failed, tidegate_upstream_errors_total
#     {kind="connect"}) against the origin's count (summed over its restarts) plus the
#     requests its kills left unread.
# It also prints RSS at the start of load, its peak, and at the end, the file descriptors
# likewise, and for each restart of the origin the time until goodput is back to 90% of what
# it was before the fault. It exits 1 if a difference is not 0. Output: a directory named at
# the end.
set -euo pipefail

duration="${1:-10m}"
rate="${2:-1000}"
period="${3:-60}"
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mktemp -d "${TMPDIR:-/tmp}/tidegate-soak.XXXXXX")"
pids=()
cleanup() {
    stop_started
    [[ -n "${origin_pid:-}" ]] && kill -CONT "$origin_pid" 2>/dev/null && kill "$origin_pid" 2>/dev/null
    true
}
trap cleanup EXIT

# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
install_tools curl python3
command -v ss >/dev/null || apt_install iproute2

build_tidegate

origin_port=18280 proxy_port=18281 admin_port=18291
seconds=$(python3 -c "
import re,sys
m = re.fullmatch(r'(\d+)(s|m|h)?', '$duration')
if not m: sys.exit('DURATION: a whole number of s, m or h, such as 90s or 10m')
print(int(m[1]) * {'s': 1, 'm': 60, 'h': 3600, None: 1}[m[2]])")

# Each instance of the origin counts its arrivals in a file of its own: arrived.1, .2, ...
instance=0
start_origin() {
    instance=$((instance + 1))
    python3 "$root/bench/soak_origin.py" "$origin_port" "$out/arrived.$instance" 10 0.1 100 \
        >>"$out/origin.log" 2>&1 &
    origin_pid=$!
    wait_port "$origin_port"
}
# Requests sent to the origin that it has not read: one per socket of its port with bytes in
# its receive queue (accepted or still in the listener's queue).
unread() {
    ss -Htn state established "( sport = :$origin_port )" | awk '$1 > 0 { n++ } END { print n + 0 }'
}
start_origin

cat >"$out/proxy.toml" <<TOML
listen = "127.0.0.1:$proxy_port"
admin = "127.0.0.1:$admin_port"
[[upstreams]]
url = "http://127.0.0.1:$origin_port"
name = "origin"
[client]
timeout = "5s"
[priority]
caller_key_header = "tidegate-key"
[connections]
header_read_timeout = "5s"
write_timeout = "5s"
TOML
"$tidegate" proxy --config "$out/proxy.toml" >"$out/proxy.log" 2>&1 &
proxy_pid=$!
pids+=("$proxy_pid")
wait_port "$proxy_port"

# One line a second: elapsed seconds, RSS in KiB, open file descriptors, the gate's limit.
echo "second,rss_kib,fds,limit" >"$out/samples.csv"
(
    i=0
    while kill -0 "$proxy_pid" 2>/dev/null; do
        rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$proxy_pid/status" 2>/dev/null || echo 0)
        fds=$(find "/proc/$proxy_pid/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
        limit=$(curl -sf --max-time 2 "http://127.0.0.1:$admin_port/metrics" |
            awk '$1 ~ /^tidegate_limit[{]/ { print $2; exit }' || true)
        echo "$i,$rss,$fds,${limit:-0}" >>"$out/samples.csv"
        i=$((i + 1))
        sleep 1
    done
) &
pids+=("$!")

# The faults, every PERIOD seconds: hung at +10 s for 5 s, killed and restarted at +30 s, a
# burst of 50 slow clients at +40 s.
(
    t=0
    while [[ $t -lt $seconds ]]; do
        sleep 10
        kill -STOP "$origin_pid" && echo "$(date +%s) origin hung" >>"$out/faults.log"
        sleep 5
        kill -CONT "$origin_pid" && echo "$(date +%s) origin resumed" >>"$out/faults.log"
        sleep 15
        # Frozen, the origin reads nothing more and the proxy's slots to it fill: what is
        # unread now is what the kill loses.
        kill -STOP "$origin_pid"
        sleep 0.5
        # The proxy paused for the instant of the kill: a dying process closes its sockets
        # one after another, and a request sent meanwhile on one closed later would be lost
        # unread and uncounted. Paused, the proxy finds them all closed when it resumes.
        kill -STOP "$proxy_pid"
        echo "$(unread)" >>"$out/unread"
        kill -KILL "$origin_pid"
        wait "$origin_pid" 2>/dev/null || true
        kill -CONT "$proxy_pid"
        echo "$(date +%s) origin killed" >>"$out/faults.log"
        sleep 1
        start_origin
        echo "$(date +%s) origin restarted (pid $origin_pid)" >>"$out/faults.log"
        echo "$origin_pid" >"$out/origin_pid"
        sleep 9
        for _ in $(seq 50); do
            (exec 3<>"/dev/tcp/127.0.0.1/$proxy_port" && printf 'GET / HTTP/1.1\r\nhost: slow\r\n' >&3 &&
                sleep 10) 2>/dev/null &
        done
        echo "$(date +%s) 50 slow clients" >>"$out/faults.log"
        t=$((t + period))
        sleep $((period - 40))
    done
) &
faults=$!

date +%s >"$out/load_started"
# Connections the kernel dropped from full listen queues, machine-wide (any process's): a
# request the generator counts as sent may never have had a connection.
listen_overflows() { nstat -az TcpExtListenOverflows 2>/dev/null | awk '$1 == "TcpExtListenOverflows" { print $2 }'; }
listen_overflows >"$out/overflows_before"
"$tidegate" load "http://127.0.0.1:$proxy_port/" --rate "$rate" --duration "${seconds}s" \
    --tiers 0:10,1:20,3:40,5:30 --cohort-keys 1000 --key-header tidegate-key --timeout 2s \
    --progress never --json >"$out/load.json"
listen_overflows >"$out/overflows_after"
kill "$faults" 2>/dev/null || true
wait "$faults" 2>/dev/null || true
[[ -f "$out/origin_pid" ]] && origin_pid=$(cat "$out/origin_pid")
kill -CONT "$origin_pid" 2>/dev/null || true

# Every request ended at the proxy: nothing in flight, queued, or abandoned at the upstream.
metrics() { curl -sf --max-time 5 "http://127.0.0.1:$admin_port/metrics"; }
sum() { metrics | awk -v re="$1" '$0 !~ /^#/ && $1 ~ re { s += $2 } END { printf "%d", s }'; }
for _ in $(seq 300); do
    busy=$(sum '^tidegate_(inflight|queue_length|upstream_abandoned)([{]|$)')
    [[ $busy -eq 0 ]] && break
    sleep 0.1
done
metrics >"$out/metrics.txt"

python3 - "$out" <<'PY'
import glob, json, re, sys
out = sys.argv[1]
load = json.load(open(f"{out}/load.json"))
series = {}
for line in open(f"{out}/metrics.txt"):
    if line.startswith("#") or not line.strip():
        continue
    name_labels, value = line.rsplit(" ", 1)
    name, _, labels = name_labels.partition("{")
    labels = dict(re.findall(r'(\w+)="([^"]*)"', labels))
    series.setdefault(name, []).append((labels, float(value)))
def total(name, **want):
    return int(sum(v for l, v in series.get(name, []) if all(l.get(k) == w for k, w in want.items())))
classes = ["ok", "dropped", "ignored", "shed", "cancelled", "client_error", "unavailable", "refused"]
hist = {c: total("tidegate_request_duration_seconds_count", **{"class": c}) for c in classes}
out_ = lambda o: total("tidegate_requests_total", outcome=o)
pairs = [
    ("ok", hist["ok"], out_("ok")),
    ("dropped", hist["dropped"], out_("dropped")),
    ("ignored", hist["ignored"] + hist["client_error"], out_("ignored")),
    ("cancelled", hist["cancelled"], out_("cancelled_queued") + out_("cancelled_inflight")),
    ("shed", hist["shed"], sum(out_(o) for o in ["rejected_regulator", "rejected_queue_full", "rejected_no_lease", "expired"])),
]
sent = load["total"]["sent"]
counted = sum(hist.values())
# A request sent on a kept-alive connection just as the proxy closed it for idling (its
# header timeout) never reaches the proxy: the generator sees the connection closed.
closed_idle = load["errors"].get("closed", 0)
print(f"load: offered {load['total']['offered']}, sent {sent}, ok {load['total']['ok']}, "
      f"shed {load['total']['shed']}, timed out {load['total']['timed_out']}, errors {load['total']['errors']}")
for t in load["tiers"]:
    print(f"  tier {t['tier']}: sent {t['sent']}, ok {t['ok']} ({100 * t['ok'] / max(t['sent'], 1):.1f}%)")
print(f"proxy: counted {counted} {hist}")
bad = []
print(f"load sent - closed before an answer ({closed_idle}) - proxy counted = {sent - closed_idle - counted}")
if sent - closed_idle != counted:
    bad.append("load/proxy")
for what, h, r in pairs:
    print(f"ledgers {what}: histogram {h} - requests_total {r} = {h - r}")
    if h != r:
        bad.append(what)
# What the proxy forwarded, and what reached the origin.
admitted = out_("ok") + out_("dropped") + out_("ignored") + out_("cancelled_inflight")
connect_failed = total("tidegate_upstream_errors_total", kind="connect")
forwarded = admitted - connect_failed
arrived = sum(int(open(f).read().strip() or 0) for f in glob.glob(f"{out}/arrived.*"))
unread = sum(int(l) for l in open(f"{out}/unread")) if glob.glob(f"{out}/unread") else 0
print(f"proxy forwarded {forwarded} (admitted {admitted} - connect failures {connect_failed}); "
      f"origin counted {arrived} over {len(glob.glob(f'{out}/arrived.*'))} instances, "
      f"its kills left {unread} unread")
print(f"forwarded - origin counted - unread = {forwarded - arrived - unread}")
if forwarded != arrived + unread:
    bad.append("proxy/origin")
closed = {l["reason"]: int(v) for l, v in series.get("tidegate_client_connections_closed_total", [])}
print(f"connections closed by the proxy: {closed}")
try:
    overflows = int(open(f"{out}/overflows_after").read()) - int(open(f"{out}/overflows_before").read())
    print(f"listen queue overflows on the machine during the load (any process's): {overflows}")
except ValueError:
    pass
# Time to full goodput after each restart: from the restart to the first second with at least
# 90% of the ok responses per second of the 9 seconds before the origin hung.
import statistics
ok = [p["ok"] for p in load["per_second"]]
started = int(open(f"{out}/load_started").read())
events = [line.split(None, 1) for line in open(f"{out}/faults.log")]
hung = [int(t) - started for t, what in events if what.startswith("origin hung")]
restarted = [int(t) - started for t, what in events if what.startswith("origin restarted")]
for h, r in zip(hung, restarted):
    if h < 1 or r >= len(ok):
        continue
    before = statistics.median(ok[max(h - 9, 0):h])
    back = next((s - r for s in range(r, len(ok)) if ok[s] >= 0.9 * before), None)
    after = statistics.median(ok[r + 1:r + 11]) if r + 1 < len(ok) else 0
    print(f"restart at {r} s: {before:.0f} ok/s before the fault, {after:.0f} in the 10 s after; "
          + (f"90% of it back after {back} s" if back is not None else "not back to 90% by the end"))
rows = [tuple(int(float(x)) for x in l.split(",")) for l in open(f"{out}/samples.csv").read().split()[1:] if l.count(",") == 3]
if rows:
    rss = [r[1] for r in rows]; fds = [r[2] for r in rows]; limits = [r[3] for r in rows]
    print(f"RSS KiB: first {rss[0]}, peak {max(rss)}, last {rss[-1]}; fds: first {fds[0]}, peak {max(fds)}, last {fds[-1]}")
    width, height = 800, 300
    def path(values, top):
        n = max(len(values) - 1, 1)
        return " ".join(f"{'M' if i == 0 else 'L'}{40 + i * (width - 60) / n:.1f},{height - 30 - v * (height - 60) / top:.1f}" for i, v in enumerate(values))
    top_rss, top_fds, top_limit = max(max(rss), 1), max(max(fds), 1), max(max(limits), 1)
    svg = f'''<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="40" y="18">proxy RSS (blue, peak {top_rss} KiB), open fds (orange, peak {top_fds}), gate limit (green, peak {top_limit}) per second, {len(rows)} s</text>
<line x1="40" y1="{height - 30}" x2="{width - 20}" y2="{height - 30}" stroke="black"/>
<path d="{path(rss, top_rss)}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>
<path d="{path(fds, top_fds)}" fill="none" stroke="#ff7f0e" stroke-width="1.5"/>
<path d="{path(limits, top_limit)}" fill="none" stroke="#2ca02c" stroke-width="1.5"/>
</svg>'''
    open(f"{out}/rss-fds.svg", "w").write(svg)
if bad:
    print("NOT RECONCILED:", ", ".join(bad))
    sys.exit(1)
print("reconciled: every difference is 0")
PY
echo "soak.sh: output in $out (load.json, metrics.txt, samples.csv, rss-fds.svg, faults.log)"
