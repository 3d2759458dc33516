"""What `tidegate default` does when the service slows down gradually rather than in a step:
its work time drifts to twice the nominal and back, under an offered load of twice the
nominal capacity (docs/experiments/drift.md).

    cargo build --release -p tidegate
    python3 bench/drift.py [BINARY] [--seeds N] [--dir DIR]

The robustness sweep changes the capacity in one step (half the workers leave, then come
back), which Autotune's futile-shrink rule is built to see; a database that slows as its
cache cools, or a neighbour that takes more and more of the machine, moves it a little at a
time. Each shape here is a pool of `knee` workers (the sweep's service: an unbounded queue,
Poisson arrivals, a timeout of 10 work times) whose work time, in mean work times `W`:
holds for 200 W, rises to 2x in 24 equal steps over 600 W, holds at 2x for 400 W, falls
back in 24 steps over 600 W and holds for 200 W; stretched like the sweep's, by `30 / knee`
at knees under 30. The scenario files go to a temporary directory (or to DIR, kept), each
runs `BINARY sim run FILE --out DIR/NAME` for seeds 1 to N (default 3) with two arms,
`tidegate default` and a fixed limit at the knee (what an operator who knew the workers
would set; the robustness sweep's oracle picks it on most pool shapes), and the script
prints, per shape and arm, the goodput over each phase (from 50 W after it starts) as a
share of the capacity of the moment (`knee / work time`), one figure per seed, then the
mean and the least over every shape, phase and seed.
"""

import csv
import os
import subprocess
import sys
import tempfile

import scenario_args

KNEES = (3, 10, 30, 100)
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


def work_at(t):
    """The work time's multiple of the nominal at `t` work times."""
    bounds, _ = phase_bounds()
    for name, sign, base in (("slowing", 1, 1.0), ("recovering", -1, 2.0)):
        lo, hi = bounds[name]
        if lo <= t < hi:
            return base + sign * int((t - lo) / ((hi - lo) / STEPS)) / STEPS
    lo, hi = bounds["slow"]
    return 2.0 if lo <= t < hi else 1.0


def scenario(knee, dist, work_ms):
    bounds, total = phase_bounds()
    unit = work_ms / 1000.0 * max(1.0, 30.0 / knee)
    lines = [
        "seed = 1",
        f'duration = "{total * unit:.3f}s"',
        f'warmup = "{bounds["slowing"][0] * unit:.3f}s"',
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
        lo, hi = bounds[name]
        for i in range(1, STEPS + 1):
            at = (lo + i * (hi - lo) / STEPS) * unit
            work_us = round(work_ms * 1000 * (base + sign * i / STEPS))
            lines += ["[[service.changes]]", f'at = "{at:.3f}s"', f'work = "{work_us}us"', ""]
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


def shares(csv_path, knee, work_ms, unit):
    """Per arm, the goodput share of the capacity of the moment in each judged phase."""
    bounds, _ = phase_bounds()
    sums = {}
    with open(csv_path) as f:
        for row in csv.DictReader(f):
            t = (int(row["second"]) - 0.5) / unit
            for name in JUDGED:
                lo, hi = bounds[name]
                if lo + SKIP_W <= t < hi:
                    ok, cap = sums.setdefault((row["arm"], name), [0.0, 0.0])
                    capacity = knee / (work_ms / 1000.0 * work_at(t))
                    sums[(row["arm"], name)] = [ok + float(row["ok"]), cap + capacity]
    return {key: ok / cap for key, (ok, cap) in sums.items() if cap > 0}


def main():
    binary, seeds, keep = scenario_args.parse(sys.argv[1:])
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = keep or scratch
        for knee in KNEES:
            for dist in DISTS:
                for work_ms in WORKS_MS:
                    name = f"drift-{knee}-{dist}-{work_ms}ms"
                    text, unit = scenario(knee, dist, work_ms)
                    path = os.path.join(tmp, f"{name}.toml")
                    with open(path, "w") as f:
                        f.write(text)
                    for seed in range(1, seeds + 1):
                        out = os.path.join(tmp, f"{name}-{seed}")
                        subprocess.run(
                            [binary, "sim", "run", path, "--seed", str(seed), "--out", out],
                            check=True, capture_output=True,
                        )
                        got = shares(os.path.join(out, f"{name}.csv"), knee, work_ms, unit)
                        for (arm, phase), share in got.items():
                            results.setdefault((arm, knee, dist, work_ms), {}).setdefault(phase, []).append(share)
    print(f"Goodput as a share of the capacity of the moment, seeds 1-{seeds} (from {SKIP_W} W into each phase):")
    print()
    print("| arm | knee | work | " + " | ".join(JUDGED) + " |")
    print("|---|---|---|" + "---|" * len(JUDGED))
    for (arm, knee, dist, work_ms), phases in sorted(results.items()):
        cells = [" / ".join(f"{100 * x:.1f}" for x in phases.get(p, [])) for p in JUDGED]
        print(f"| {arm} | {knee} | {dist} {work_ms} ms | " + " | ".join(cells) + " |")
    print()
    for arm in sorted({key[0] for key in results}):
        every = [x for key, phases in results.items() if key[0] == arm for p in JUDGED for x in phases.get(p, [])]
        print(f"{arm}: mean {100 * sum(every) / len(every):.1f}%, least {100 * min(every):.1f}% "
              f"over {len(every)} phase-seeds")


if __name__ == "__main__":
    main()
