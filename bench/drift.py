"""What `tidegate default` does when the service's capacity moves gradually rather than in a
step: its work time drifts to twice the nominal and back, or (`--workers`) half its workers
leave one by one and come back, under an offered load of twice the nominal capacity
(docs/experiments/drift.md).

    cargo build --release -p tidegate
    python3 bench/drift.py [BINARY] [--workers] [--seeds N] [--dir DIR]

The robustness sweep changes the capacity in one step (half the workers leave, then come
back), which Autotune's futile-shrink rule is built to see; a database that slows as its
cache cools, or a neighbour that takes more and more of the machine, moves it a little at a
time. Each shape here is a pool of `knee` workers (the sweep's service: an unbounded queue,
Poisson arrivals, a timeout of 10 work times), in mean work times `W`: 200 W as it is,
600 W slowing to half its capacity in 24 equal steps, 400 W at half, 600 W recovering in 24
steps, 200 W as it was; stretched like the sweep's, by `30 / knee` at knees under 30. The
two ways of losing half the capacity ask opposite things of the limit: a slower work time
leaves the knee where it was (the same concurrency is still right, and the longer rtt is no
queue), fewer workers halve it (the longer rtt at the same concurrency is a queue). The
scenario files go to a temporary directory (or to DIR, kept), each runs `BINARY sim run FILE
--seed S --out DIR/NAME` for seeds 1 to N (default 3) with two arms, `tidegate default` and a
fixed limit at the nominal knee (what an operator who knew the workers would set), and the
script prints, per shape and arm, over each phase (from 50 W after it starts) and each seed:
the goodput as a share of the capacity of the moment, and the mean limit over the knee of
the moment; then the means and the least goodput over every shape, phase and seed.
"""

import csv
import os
import subprocess
import sys
import tempfile

import scenario_args

KNEES = (3, 10, 30, 100)
WORKER_KNEES = (10, 30, 100)
WORKS_MS = (20, 100)
DISTS = {
    "exponential": 'spread = "exponential"',
    "uniform": 'spread = "uniform"\njitter = 0.2',
    "lognormal": 'spread = "lognormal"\nsigma = 0.5',
}
# (name, length in W); the work time's multiple is `work_at`.
PHASES = [("before", 200), ("slowing", 600), ("slow", 400), ("recovering", 600), ("after", 200)]
STEPS = 24
JUDGED = ("slowing", "slow", "recovering")
SKIP_W = 50


def phase_bounds():
    start, bounds = 0, {}
    for name, length in PHASES:
        bounds[name] = (start, start + length)
        start += length
    return bounds, start


# Each phase's `(start, end)` in W, and the run's length.
BOUNDS, TOTAL = phase_bounds()


def work_at(t):
    """The capacity's divisor at `t` work times: 1 as it is, 2 at half."""
    for name, sign, base in (("slowing", 1, 1.0), ("recovering", -1, 2.0)):
        lo, hi = BOUNDS[name]
        if lo <= t < hi:
            return base + sign * int((t - lo) / ((hi - lo) / STEPS)) / STEPS
    lo, hi = BOUNDS["slow"]
    return 2.0 if lo <= t < hi else 1.0


def workers_at(knee, slowing):
    """The workers left when the capacity is divided by `slowing`, at least one."""
    return max(1, round(knee / slowing))


def scenario(knee, dist, work_ms, workers):
    unit = work_ms / 1000.0 * max(1.0, 30.0 / knee)
    lines = [
        "seed = 1",
        f'duration = "{TOTAL * unit:.3f}s"',
        f'warmup = "{BOUNDS["slowing"][0] * unit:.3f}s"',
        "",
        "[service]",
        'kind = "pool"',
        DISTS[dist],
        "",
        "[service.pool]",
        f"workers = {knee}",
        f'work = "{work_ms}ms"',
        f"optimal = {knee}",
        "",
    ]
    for name, sign, base in (("slowing", 1, 1.0), ("recovering", -1, 2.0)):
        lo, hi = BOUNDS[name]
        for i in range(1, STEPS + 1):
            at = (lo + i * (hi - lo) / STEPS) * unit
            slowing = base + sign * i / STEPS
            change = (
                f"workers = {workers_at(knee, slowing)}"
                if workers
                else f'work = "{round(work_ms * 1000 * slowing)}us"'
            )
            lines += ["[[service.changes]]", f'at = "{at:.3f}s"', change, ""]
    lines += [
        "[load]",
        'arrivals = "poisson"',
        f"rate = {2.0 * knee * 1000.0 / work_ms}",
        f'timeout = "{10 * work_ms}ms"',
        "",
        "[[arms]]",
        'name = "tidegate default"',
        "",
        "[[arms]]",
        'name = "fixed knee"',
        f'limit = {{ algorithm = "fixed", fixed = {{ limit = {knee} }} }}',
        "",
    ]
    return "\n".join(lines), unit


def phase_figures(csv_path, knee, work_ms, unit, workers):
    """Per (arm, phase): the goodput share of the capacity of the moment, and the mean limit
    over the knee of the moment."""
    sums = {}
    with open(csv_path) as f:
        for row in csv.DictReader(f):
            t = (int(row["second"]) - 0.5) / unit
            slowing = work_at(t)
            knee_now = workers_at(knee, slowing) if workers else knee
            capacity = knee_now / (work_ms / 1000.0 * (1.0 if workers else slowing))
            for name in JUDGED:
                lo, hi = BOUNDS[name]
                if lo + SKIP_W <= t < hi:
                    acc = sums.setdefault((row["arm"], name), [0.0, 0.0, 0.0, 0])
                    acc[0] += float(row["ok"])
                    acc[1] += capacity
                    acc[2] += float(row["limit"]) / knee_now
                    acc[3] += 1
    return {key: (ok / cap, over / n) for key, (ok, cap, over, n) in sums.items() if cap > 0}


def main():
    args = sys.argv[1:]
    workers = "--workers" in args
    if workers:
        args.remove("--workers")
    binary, seeds, keep = scenario_args.parse(args)
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = keep or scratch
        for knee in WORKER_KNEES if workers else KNEES:
            for dist in DISTS:
                for work_ms in WORKS_MS:
                    name = f"{'workers' if workers else 'work'}-{knee}-{dist}-{work_ms}ms"
                    text, unit = scenario(knee, dist, work_ms, workers)
                    path = os.path.join(tmp, f"{name}.toml")
                    with open(path, "w") as f:
                        f.write(text)
                    for seed in range(1, seeds + 1):
                        out = os.path.join(tmp, f"{name}-{seed}")
                        subprocess.run(
                            [binary, "sim", "run", path, "--seed", str(seed), "--out", out],
                            check=True, capture_output=True,
                        )
                        got = phase_figures(os.path.join(out, f"{name}.csv"), knee, work_ms, unit, workers)
                        for (arm, phase), figures in got.items():
                            results.setdefault((arm, knee, dist, work_ms), {}).setdefault(phase, []).append(figures)
    moving = "half the workers leaving" if workers else "the work time doubling"
    print(f"{moving.capitalize()} and recovering; per phase (from {SKIP_W} W into it), seeds 1-{seeds}: "
          "goodput as a share of the capacity of the moment (limit over the knee of the moment)")
    print()
    print("| arm | knee | work | " + " | ".join(JUDGED) + " |")
    print("|---|---|---|" + "---|" * len(JUDGED))
    for (arm, knee, dist, work_ms), phases in sorted(results.items()):
        cells = [
            " / ".join(f"{100 * share:.1f} ({over:.2f})" for share, over in phases.get(p, []))
            for p in JUDGED
        ]
        print(f"| {arm} | {knee} | {dist} {work_ms} ms | " + " | ".join(cells) + " |")
    print()
    for arm in sorted({key[0] for key in results}):
        every = [f for key, phases in results.items() if key[0] == arm for p in JUDGED for f in phases.get(p, [])]
        shares = [share for share, _ in every]
        overs = [over for _, over in every]
        print(f"{arm}: goodput mean {100 * sum(shares) / len(shares):.1f}%, least {100 * min(shares):.1f}%; "
              f"limit over the knee mean {sum(overs) / len(overs):.2f}, most {max(overs):.2f}; "
              f"over {len(every)} phase-seeds")


if __name__ == "__main__":
    main()
