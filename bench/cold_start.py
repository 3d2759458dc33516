"""What `tidegate default` does in its first seconds: a gate started in front of a service
already under load, at half its capacity or at three times it (docs/experiments/cold-start.md).

    cargo build --release -p tidegate
    python3 bench/cold_start.py [BINARY] [--seeds N] [--dir DIR]

The robustness sweep starts every case at half the capacity and steps up after 50 work times,
so a gate that starts into an overload is not in its family; nor is the shed count at half
load told apart from the first seconds. This writes the scenario files into a temporary
directory (or into DIR, kept, to run one longer or with `--out`: `tidegate sim run
DIR/overload-3-uniform.toml --duration 300s --out o`), runs `BINARY sim run FILE --seed S
--arm "tidegate default" --json` on each for seeds 1 to N (default 3), and prints two tables
of means over the seeds. The service is the sweep's pool: exponential, uniform +-20% or
constant work, an unbounded queue, Poisson arrivals, a timeout of 10 work times.

- At half the capacity from the start (exponential work): the requests shed over the run,
  and their share of the offered load (the sweep's target is none).
- At three times the capacity from the start (100 ms of work), from 5 s on: goodput as a
  share of the capacity, p99, and the mean limit over the knee.
"""

import json
import os
import subprocess
import sys
import tempfile

import scenario_args

HALF = [(100, 100), (500, 100), (100, 2000), (500, 2000)]
OVERLOAD = [(knee, dist) for knee in (3, 10, 30, 100) for dist in ("exponential", "uniform", "constant")]


def scenario(knee, work_ms, dist, rate, duration_s, warmup_s):
    return f"""seed = 1
duration = "{duration_s}s"
warmup = "{warmup_s}s"

[service]
kind = "pool"
spread = "{dist}"
jitter = 0.2

[service.pool]
workers = {knee}
work = "{work_ms}ms"
optimal = {knee}

[load]
arrivals = "poisson"
rate = {rate}
timeout = "{10 * work_ms}ms"

[[arms]]
name = "tidegate default"
"""


def run(binary, path, seed):
    out = subprocess.run(
        [binary, "sim", "run", path, "--seed", str(seed), "--arm", "tidegate default", "--json"],
        check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out)["arms"][0]


def main():
    binary, seeds, keep = scenario_args.parse(sys.argv[1:])
    with tempfile.TemporaryDirectory() as scratch:
        tmp = keep or scratch
        print(f"At half the capacity from the start, means over seeds 1-{seeds}:\n")
        print("| knee | work | shed over the run | of the offered |")
        print("|---|---|---|---|")
        for knee, work_ms in HALF:
            capacity = knee * 1000 / work_ms
            duration = max(25, 60 * work_ms // 1000)
            path = os.path.join(tmp, f"half-{knee}-{work_ms}.toml")
            with open(path, "w") as f:
                f.write(scenario(knee, work_ms, "exponential", capacity / 2, duration, duration // 5))
            shed, share = [], []
            for seed in range(1, seeds + 1):
                arm = run(binary, path, seed)
                offered = arm["offered_rps"] * duration
                shed.append(arm["shed_ratio"] * offered)
                share.append(arm["shed_ratio"])
            work = f"{work_ms} ms" if work_ms < 1000 else f"{work_ms // 1000} s"
            print(f"| {knee} | {work} ({duration} s run) | {sum(shed) / seeds:,.0f} "
                  f"| {100 * sum(share) / seeds:.1f}% |")
        print(f"\nAt three times the capacity from the start (100 ms of work), from 5 s to 30 s, "
              f"means over seeds 1-{seeds}:\n")
        print("| knee | work | goodput, of the capacity | p99 | limit, over the knee |")
        print("|---|---|---|---|---|")
        for knee, dist in OVERLOAD:
            capacity = knee * 10
            path = os.path.join(tmp, f"overload-{knee}-{dist}.toml")
            with open(path, "w") as f:
                f.write(scenario(knee, 100, dist, 3 * capacity, 30, 5))
            runs = [run(binary, path, seed)["steady"] for seed in range(1, seeds + 1)]
            goodput = sum(r["goodput_rps"] for r in runs) / seeds / capacity
            p99 = sum(r["p99_ms"] for r in runs) / seeds
            limit = sum(r["limit"] for r in runs) / seeds / knee
            print(f"| {knee} | {dist} | {100 * goodput:.1f}% | {p99:.0f} ms | {limit:.2f} |")


if __name__ == "__main__":
    main()
