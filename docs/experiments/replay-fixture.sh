#!/usr/bin/env bash
# The fixture of `tidegate sim replay`: a real nginx access log of a service of known shape,
# and the goodput the clients really got at each rate.
#
# nginx on 127.0.0.1 (log_format tidegate, docs/replay.md) proxies to `tidegate origin`, a pool
# of 20 workers with 100 ms of work (uniform +-20%) and an internal queue of 20 (503 beyond):
# a capacity of 200 requests per second. `tidegate load` drives it with Poisson arrivals at
# 100, 300 and 600 rps (0.5x, 1.5x and 3x the capacity), each client waiting 1 s, one run
# after the other. The access log goes to crates/tidegate-sim/tests/fixtures/nginx-access.log,
# each run's rate, duration and goodput (from `tidegate load --json`) to nginx-access.runs.csv
# beside it; crates/tidegate-sim/tests/replay_fixture.rs checks the fitted model against them.
#
# Usage: docs/experiments/replay-fixture.sh [OUT_DIR]   (installs nginx-light if missing; about
# 20 s). TIDEGATE=path/to/tidegate uses that binary instead of building a debug one.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../../bench/lib.sh
source "$root/bench/lib.sh"
out=${1:-$root/crates/tidegate-sim/tests/fixtures}
proxy_port=${PROXY_PORT:-18480}
origin_port=${ORIGIN_PORT:-18481}
rates=(100 300 600)
durations=(6s 4s 3s)
timeout=1s

install_tools nginx
if [[ -z ${TIDEGATE:-} ]]; then
    cargo build -q -p tidegate --manifest-path "$root/Cargo.toml"
    TIDEGATE=$root/target/debug/tidegate
fi
dir=$(mktemp -d)
pids=()
trap 'stop_started; rm -rf "$dir"' EXIT

"$TIDEGATE" origin --listen "127.0.0.1:$origin_port" --workers 20 --work 100ms --queue 20 \
    --spread uniform --jitter 0.2 &
pids+=($!)
nginx_conf "$dir" "log_format tidegate '\$remote_addr - \$remote_user [\$time_local] \"\$request\" \$status \$body_bytes_sent \"\$http_referer\" \"\$http_user_agent\" \$request_time \$upstream_response_time \$msec';
    upstream origin { server 127.0.0.1:$origin_port; keepalive 128; }
    server { listen 127.0.0.1:$proxy_port; access_log $dir/access.log tidegate;
        location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ''; } }"
nginx -c "$dir/nginx.conf" -p "$dir" &
pids+=($!)
wait_port "$origin_port"
wait_port "$proxy_port"

mkdir -p "$out"
runs=$out/nginx-access.runs.csv
echo "rate_rps,duration_s,timeout_s,offered,ok,goodput_rps" >"$runs"
for i in "${!rates[@]}"; do
    "$TIDEGATE" load "http://127.0.0.1:$proxy_port/work" --rate "${rates[$i]}" \
        --duration "${durations[$i]}" --arrivals poisson --timeout "$timeout" --seed "$((i + 1))" \
        --progress never --json >"$dir/run.json"
    python3 - "$dir/run.json" "${rates[$i]}" "${durations[$i]%s}" "${timeout%s}" >>"$runs" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["total"]
print(f"{sys.argv[2]},{sys.argv[3]},{sys.argv[4]},{r['offered']},{r['ok']},{r['goodput']:.1f}")
PY
    # Let the origin drain its queue before the next rate.
    sleep 1
done
cp "$dir/access.log" "$out/nginx-access.log"
echo "wrote $out/nginx-access.log ($(wc -l <"$out/nginx-access.log") lines) and $runs:"
cat "$runs"
