#!/usr/bin/env bash
# The proxy's resident memory through waves of many connections: each wave opens CONNS
# connections at once, sends one request on each, reads the answers and closes them all; then
# the proxy idles. RSS is read after each wave and again after the idle time, to show whether
# the memory a wave took is given back.
#
#   bench/waves.sh [WAVES] [CONNS] [IDLE_SECONDS]     (default: 3 waves of 10000, 15 s idle)
#
# The origin is `tidegate origin` (fast: 64 workers of 1 ms); the proxy runs with its default
# configuration. Prints one line per wave and the RSS after the idle time. A measurement, not
# a test.
#
# To see where the memory is (docs/proxy.md, "Bounded resources"): PROXY_ENV="VAR=VALUE ..."
# runs the proxy with those variables (MALLOC_ARENA_MAX=1, LD_PRELOAD=libjemalloc.so.2 ...),
# and MALLOC_PROBE=1 then, after the idle time, prints glibc's malloc_stats and the RSS after
# malloc_trim(0), both called in the proxy with gdb (installed if missing).
set -euo pipefail

waves="${1:-3}"
conns="${2:-10000}"
idle="${3:-15}"
root="$(cd "$(dirname "$0")/.." && pwd)"
pids=()
trap 'stop_started' EXIT

# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
install_tools python3
[[ -z "${MALLOC_PROBE:-}" ]] || install_tools gdb

# Each process needs a descriptor per connection: as many as the system allows.
ulimit -n "$(ulimit -Hn)"
build_tidegate
origin_port=18380 proxy_port=18381 admin_port=18391

"$tidegate" origin --listen "127.0.0.1:$origin_port" --workers 64 --work 1ms >/dev/null 2>&1 &
pids+=("$!")
wait_port "$origin_port"
stderr="$(mktemp "${TMPDIR:-/tmp}/tidegate-waves-stderr.XXXXXX")"
# shellcheck disable=SC2086 # PROXY_ENV is a list of VAR=VALUE words
env ${PROXY_ENV:-} "$tidegate" proxy --upstream "http://127.0.0.1:$origin_port" \
    --listen "127.0.0.1:$proxy_port" --admin "127.0.0.1:$admin_port" >/dev/null 2>"$stderr" &
proxy_pid=$!
pids+=("$proxy_pid")
wait_port "$proxy_port"

rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$proxy_pid/status"; }
echo "before: RSS $(rss) KiB"
for wave in $(seq "$waves"); do
    python3 - "$proxy_port" "$conns" <<'PY'
import asyncio, sys
port, conns = int(sys.argv[1]), int(sys.argv[2])
async def one():
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nhost: wave\r\nconnection: close\r\n\r\n")
        await writer.drain()
        answer = await reader.read()
        writer.close()
        return answer.startswith(b"HTTP/1.1 ")
    except OSError:
        return False
async def main():
    results = await asyncio.gather(*(one() for _ in range(conns)))
    print(f"  {sum(results)} of {conns} answered")
asyncio.run(main())
PY
    echo "wave $wave: RSS $(rss) KiB"
done
sleep "$idle"
echo "after ${idle} s idle: RSS $(rss) KiB"
if [[ -n "${MALLOC_PROBE:-}" ]]; then
    gdb -p "$proxy_pid" -batch -ex 'call (void)malloc_stats()' >/dev/null 2>&1
    sleep 0.2
    grep -E '^(Arena|Total|system|in use)' "$stderr" || true
    gdb -p "$proxy_pid" -batch -ex 'call (int)malloc_trim(0)' >/dev/null 2>&1
    echo "after malloc_trim(0): RSS $(rss) KiB"
fi
rm -f "$stderr"
