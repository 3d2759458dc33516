# Shared by the scripts under bench/ (sourced, not run): installing what a benchmark needs,
# placing processes on cores, a one-process nginx, waiting for a port, reading wrk and /proc.

# apt_install [PKG...]: installs Debian packages (as root, or with sudo); nothing when none.
apt_install() {
    [[ $# -gt 0 ]] || return 0
    local sudo_cmd=()
    [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    "${sudo_cmd[@]}" apt-get install -y -qq "$@" >/dev/null
}

# install_tools TOOL...: installs from Debian's packages whichever of the named tools is
# missing (nginx as nginx-light; the others under their own names), and puts /usr/sbin, where
# nginx and haproxy live, on PATH.
install_tools() {
    local need=() tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null || [[ -x /usr/sbin/$tool ]] ||
            need+=("$([[ $tool == nginx ]] && echo nginx-light || echo "$tool")")
    done
    apt_install "${need[@]}"
    export PATH="$PATH:/usr/sbin"
}

# compared_builds ARGS...: the arguments of a script that compares builds, ROUNDS SECONDS
# CONNECTIONS BINARY...: sets rounds, secs, conns and the array binaries, or prints the usage
# and exits.
compared_builds() {
    if [[ $# -lt 4 ]]; then
        echo "usage: $0 ROUNDS SECONDS CONNECTIONS BINARY..." >&2
        exit 2
    fi
    rounds="$1" secs="$2" conns="$3"
    binaries=("${@:4}")
}

# bench_start NAME: a fresh work directory in $work and an empty `pids`; on exit the processes
# in `pids` are stopped and the directory removed.
bench_start() {
    work="$(mktemp -d "${TMPDIR:-/tmp}/tidegate-$1-bench.XXXXXX")"
    pids=()
    trap 'stop_started; rm -rf "$work"' EXIT
}

# build_tidegate: the release build of the CLI, its path in $tidegate ($root: the repository;
# TIDEGATE_BENCH_BINARY, when set, is taken instead of building: CI runs the scripts once that way;
# the build goes to CARGO_TARGET_DIR when set, as cargo's does, given as an absolute path).
build_tidegate() {
    if [[ -n ${TIDEGATE_BENCH_BINARY:-} ]]; then
        # CI's smoke run: a binary already built (its figures mean nothing).
        tidegate=$TIDEGATE_BENCH_BINARY
        return
    fi
    cargo build --quiet --release --manifest-path "$root/Cargo.toml" -p tidegate
    tidegate="${CARGO_TARGET_DIR:-$root/target}/release/tidegate"
}

# stop_started: kills the processes whose ids the calling script put in its array `pids`, and
# waits for them (for its EXIT trap).
stop_started() {
    local pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}

# place_cpus: sets proxy_cpu (the last core alone, for the process under test) and rest_cpu
# (the other cores, for the origin and the load), as command prefixes; both empty on one core.
place_cpus() {
    local cores
    cores=$(nproc)
    if [[ $cores -ge 2 ]]; then
        proxy_cpu=(taskset -c "$((cores - 1))")
        rest_cpu=(taskset -c "0-$((cores - 2))")
    else
        proxy_cpu=()
        rest_cpu=()
    fi
}

# handicap NICENESS: a CPU hog at nice 0 on proxy_cpu's core (place_cpus), and sets
# handicapped, the prefix that runs a process on that core at nice NICENESS beside it, so that
# the scheduler gives a running proxy a small share of the core (about 1.4% at nice 19) in
# short slices, rather than whole periods off as a CPU quota would.
handicap() {
    "${proxy_cpu[@]}" sh -c 'while :; do :; done' &
    pids+=($!)
    handicapped=(nice -n "$1" "${proxy_cpu[@]}")
}

# nginx_conf DIR BODY: DIR/nginx.conf, one nginx process (no master, one worker) keeping its
# files in DIR, with BODY inside its http block.
nginx_conf() {
    mkdir -p "$1/logs"
    cat >"$1/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
pid $1/nginx.pid;
error_log $1/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $1;
    proxy_temp_path $1;
    fastcgi_temp_path $1;
    uwsgi_temp_path $1;
    scgi_temp_path $1;
    keepalive_requests 1000000;
    $2
}
CONF
}

# hello_origin DIR PORT: an nginx configuration in DIR answering "hello, world" on
# 127.0.0.1:PORT, the origin every benchmark here puts behind the proxies.
hello_origin() {
    nginx_conf "$1" "server { listen 127.0.0.1:$2; location / { return 200 'hello, world\n'; } }"
}

# nginx_proxy DIR PORT ORIGIN_PORT: an nginx configuration in DIR proxying 127.0.0.1:PORT
# to 127.0.0.1:ORIGIN_PORT over kept-alive HTTP/1.1 connections: the peer tidegate is
# compared with.
nginx_proxy() {
    nginx_conf "$1" "upstream origin { server 127.0.0.1:$3; keepalive 128; }
    server { listen 127.0.0.1:$2; location / {
        proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ''; } }"
}

# wait_port PORT: until something listens on 127.0.0.1:PORT (10 s at most, then exit 1).
wait_port() {
    for _ in $(seq 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "nothing listens on 127.0.0.1:$1" >&2
    exit 1
}

# to_ms: wrk's latency on stdin ("812.00us", "1.57ms", "2.01s"), in milliseconds.
to_ms() {
    awk '{ v = $1; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v);
           f = (u == "us") ? 0.001 : (u == "ms") ? 1 : (u == "s") ? 1000 : (u == "m") ? 60000 : 1;
           printf "%.2f", v * f }'
}

# cpu_ticks PID: the CPU time a process has used, in clock ticks (user + system, all threads).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# wrk_row RESULTS NAME URL PID SECONDS CONNECTIONS: a 2 s warm-up, then wrk (one thread,
# keep-alive) on URL for SECONDS; appends to RESULTS one line "NAME req/s p50_ms p99_ms cpu
# non2xx errors...", cpu being the share of a core process PID used meanwhile, non2xx the share
# of answers that were not 2xx or 3xx. Runs wrk on rest_cpu (place_cpus).
wrk_row() {
    local results=$1 name=$2 url=$3 pid=$4 secs=$5 conns=$6 out
    out="$(dirname "$results")/$name.wrk"
    # A short warm-up fills the proxies' connection pools and lets the gate's limit settle.
    "${rest_cpu[@]}" wrk -t1 -c"$conns" -d2s "$url" >/dev/null
    local before after
    before=$(cpu_ticks "$pid")
    "${rest_cpu[@]}" wrk -t1 -c"$conns" -d"${secs}s" --latency "$url" >"$out"
    after=$(cpu_ticks "$pid")
    local rps p50 p99 errors cpu non2xx
    rps=$(awk '/^Requests\/sec:/ { print $2 }' "$out")
    p50=$(awk '$1 == "50%" { print $2 }' "$out" | to_ms)
    p99=$(awk '$1 == "99%" { print $2 }' "$out" | to_ms)
    errors=$(awk '/Socket errors/ { sub(/^ +/, ""); printf "%s; ", $0 }' "$out")
    non2xx=$(awk '/requests in/ { n = $1 } /Non-2xx/ { b = $NF } END { printf "%.3f", n ? b / n : 0 }' "$out")
    # The share of one core the process used during the run.
    cpu=$(awk -v t="$((after - before))" -v hz="$(getconf CLK_TCK)" -v s="$secs" 'BEGIN { printf "%.3f", t / hz / s }')
    echo "$name $rps $p50 $p99 $cpu $non2xx ${errors:-none}" >>"$results"
}
