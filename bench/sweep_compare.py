"""Compares two runs of the robustness sweep for one arm: how a change of the default moved it
on the whole family, the way docs/algorithms.md reports every change.

    target/release/tidegate sim sweep --arm "tidegate default" --seeds 24 --json > before.json
    (change, rebuild)
    target/release/tidegate sim sweep --arm "tidegate default" --seeds 24 --json > after.json
    python3 bench/sweep_compare.py before.json after.json ["tidegate default"] [ROWS]

Two arms of one run compare the same way, each file named with its arm after a colon:

    target/release/tidegate sim sweep --arm "tidegate default" --arm "bdp + pie" --seeds 24 \
        --json > run.json
    python3 bench/sweep_compare.py "run.json:tidegate default" "run.json:bdp + pie"

A shape is a case without its seed; its figure is the mean over the seeds of the arm's goodput
in its worst judged window. It prints the mean over the shapes, how many moved by more than 2
points either way (the largest moves, ROWS of each, default 12), and the case-seeds that miss a
target, in all and by target. A change that helps some shapes and hurts others shows both.

Then the same case-seed by case-seed, which is how the floor for a change of the default is
read (no case-seed worse): how many moved by more than 2 points either way, and the targets a
case-seed newly misses or no longer misses, with the ROWS largest moves and new misses. The
means over shapes hide a seed that collapsed behind five that gained.

Last, the shapes that moved beyond the seeds' own noise: a shape's move is the mean over its
seeds of each seed's difference, and it counts only past 2 points and past NOISE standard
errors of that mean. Many shapes are chaotic: their limit's path turns on a few windows, and
a change of nothing but the initial limit (20 to 21) moves about 440 case-seeds and 50 shapes
by more than 2 points over six seeds (docs/algorithms.md, "Judging a change"). Those moves
say nothing about the change, one at a time; but many moving the same way do, so the count of
shapes moved by more than 2 points is also put to a sign test (worse minus better past NOISE
times the square root of both).
The same for the targets: a shape newly misses a target beyond noise when at least 3 more of
its seeds miss it after than before, and that excess is past NOISE times the square root of
the seeds that changed either way (a sign test).
"""

import collections
import json
import os
import re
import sys

MOVED = 0.02
NOISE = 3.0


def shape_of(case):
    """A case's shape: its name without the seed."""
    return re.sub(r" seed=\d+", "", case)


def moves(before, after):
    """The keys that moved by more than `MOVED`: worst first, then best first."""
    moved = sorted((after[k] - before[k], k) for k in before)
    return ([m for m in moved if m[0] < -MOVED],
            [m for m in reversed(moved) if m[0] > MOVED])


def print_moves(label, worse, better, before, after, rows):
    """The `rows` largest moves each way, `before -> after` in percent."""
    for title, moved in (("worse", worse), ("better", better)):
        if moved:
            print(f"{title}{label}:")
        for _, key in moved[:rows]:
            print(f"  {100 * before[key]:5.1f} -> {100 * after[key]:5.1f}  {key}")


def past_sign_test(more, fewer):
    """Whether `more` outnumbers `fewer` by more than `NOISE` times a sign test's noise."""
    return more - fewer > NOISE * (more + fewer) ** 0.5


def load(path, arm):
    with open(path) as f:
        cases = json.load(f)
    shapes = collections.defaultdict(list)
    misses = collections.Counter()
    missing_cases = 0
    by_case = {}
    for case in cases:
        shape = shape_of(case["name"])
        result = next((a for a in case["arms"] if a["arm"] == arm), None)
        if result is None:
            sys.exit(f"{path}: no arm {arm!r} in case {case['name']!r}")
        goodput = min(result["goodput"], default=0.0)
        shapes[shape].append(goodput)
        missed = case["misses"].get(arm, [])
        missing_cases += bool(missed)
        misses.update(m["target"] for m in missed)
        by_case[case["name"]] = (goodput, {m["target"] for m in missed})
    means = {shape: sum(g) / len(g) for shape, g in shapes.items()}
    return means, misses, missing_cases, len(cases), by_case


def beyond_noise(before, after, rows):
    """Shapes whose mean move over their seeds is past `MOVED` and past `NOISE` standard errors."""
    seeds = collections.defaultdict(dict)
    for case in before:
        seeds[shape_of(case)][case] = after[case][0] - before[case][0]
    moved = []
    for shape, differences in seeds.items():
        d = list(differences.values())
        n = len(d)
        mean = sum(d) / n
        error = (sum((x - mean) ** 2 for x in d) / (n - 1) / n) ** 0.5 if n > 1 else float("inf")
        if abs(mean) > MOVED and abs(mean) > NOISE * error:
            moved.append((mean, error, shape))
    worse = sorted(m for m in moved if m[0] < 0)
    better = sorted((m for m in moved if m[0] > 0), reverse=True)
    print(f"shapes moved beyond the seeds' noise (more than 2 points and {NOISE:g} standard "
          f"errors): better {len(better)}, worse {len(worse)}")
    for title, shapes in (("worse", worse), ("better", better)):
        if shapes:
            print(f"{title} (beyond noise):")
        for mean, error, shape in shapes[:rows]:
            print(f"  {100 * mean:+5.1f} +- {100 * error:4.1f}  {shape}")


def targets_beyond_noise(before, after, rows):
    """Shape-targets whose seeds newly missing outnumber those no longer missing, past noise."""
    changed = collections.defaultdict(lambda: [0, 0])
    for case, (_, missed) in before.items():
        shape = shape_of(case)
        for target in after[case][1] - missed:
            changed[(shape, target)][0] += 1
        for target in missed - after[case][1]:
            changed[(shape, target)][1] += 1

    def beyond(more, fewer):
        return more - fewer >= 3 and past_sign_test(more, fewer)

    worse = sorted((k for k, (new, gone) in changed.items() if beyond(new, gone)))
    better = sorted((k for k, (new, gone) in changed.items() if beyond(gone, new)))
    print(f"targets missed beyond the seeds' noise: newly {len(worse)}, no longer {len(better)}")
    for title, keys in (("newly missed", worse), ("no longer missed", better)):
        for shape, target in keys[:rows]:
            new, gone = changed[(shape, target)]
            print(f"  {title}: {target} on {new} seeds, no longer on {gone}: {shape}")


def case_seeds(before, after, rows):
    """The comparison case-seed by case-seed: moves beyond `MOVED`, and targets newly missed."""
    goodput_before = {case: g for case, (g, _) in before.items()}
    goodput_after = {case: g for case, (g, _) in after.items()}
    worse, better = moves(goodput_before, goodput_after)
    newly = collections.Counter()
    no_longer = collections.Counter()
    new_misses = []
    for case, (_, missed) in before.items():
        for target in sorted(after[case][1] - missed):
            newly[target] += 1
            new_misses.append((target, case))
        no_longer.update(missed - after[case][1])
    print(f"case-seeds better by more than 2 points: {len(better)}; worse: {len(worse)}")
    print(f"targets newly missed: {sum(newly.values())}; no longer missed: {sum(no_longer.values())}")
    for target in sorted(set(newly) | set(no_longer)):
        print(f"  {target}: +{newly[target]} -{no_longer[target]}")
    print_moves(" (case-seeds)", worse, better, goodput_before, goodput_after, rows)
    if new_misses:
        print("newly missed:")
    for target, case in new_misses[:rows]:
        print(f"  {target}: {case}")


def file_and_arm(spec, arm):
    """A run's file and the arm to read in it: `FILE`, or `FILE:ARM` for another arm."""
    if os.path.exists(spec) or ":" not in spec:
        return spec, arm
    path, _, named = spec.partition(":")
    return path, named


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    arm = sys.argv[3] if len(sys.argv) > 3 else "tidegate default"
    rows = int(sys.argv[4]) if len(sys.argv) > 4 else 12
    (path_before, arm_before), (path_after, arm_after) = (
        file_and_arm(spec, arm) for spec in sys.argv[1:3])
    before, misses_before, missing_before, n, cases_before = load(path_before, arm_before)
    after, misses_after, missing_after, n_after, cases_after = load(path_after, arm_after)
    if before.keys() != after.keys() or cases_before.keys() != cases_after.keys():
        sys.exit("the two runs are not of the same family (shapes or seeds differ)")

    def mean(shapes):
        return 100 * sum(shapes.values()) / len(shapes)

    worse, better = moves(before, after)
    label = arm_before if arm_before == arm_after else f"{arm_before} -> {arm_after}"
    print(f"{label}: mean worst-window goodput {mean(before):.2f}% -> {mean(after):.2f}% "
          f"over {len(before)} shapes")
    print(f"shapes better by more than 2 points: {len(better)}; worse: {len(worse)}")
    # Each shape's move may be noise, but not many moving the same way: a sign test.
    if past_sign_test(len(worse), len(better)):
        print("  more shapes worse than better beyond a sign test's noise: a regression in all")
    print(f"case-seeds missing a target: {missing_before} -> {missing_after} of {n}")
    for target in sorted(set(misses_before) | set(misses_after)):
        print(f"  {target}: {misses_before[target]} -> {misses_after[target]}")
    print_moves("", worse, better, before, after, rows)
    print()
    case_seeds(cases_before, cases_after, rows)
    print()
    beyond_noise(cases_before, cases_after, rows)
    targets_beyond_noise(cases_before, cases_after, rows)


main()
