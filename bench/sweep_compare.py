"""Compares two runs of the robustness sweep for one arm: how a change of the default moved it
on the whole family, the way docs/algorithms.md reports every change.

    target/release/tidegate sim sweep --arm "tidegate default" --seeds 6 --json > before.json
    (change, rebuild)
    target/release/tidegate sim sweep --arm "tidegate default" --seeds 6 --json > after.json
    python3 bench/sweep_compare.py before.json after.json ["tidegate default"] [ROWS]

A shape is a case without its seed; its figure is the mean over the seeds of the arm's goodput
in its worst judged window. It prints the mean over the shapes, how many moved by more than 2
points either way (the largest moves, ROWS of each, default 12), and the case-seeds that miss a
target, in all and by target. A change that helps some shapes and hurts others shows both.
"""

import collections
import json
import re
import sys

MOVED = 0.02


def load(path, arm):
    with open(path) as f:
        cases = json.load(f)
    shapes = collections.defaultdict(list)
    misses = collections.Counter()
    missing_cases = 0
    for case in cases:
        shape = re.sub(r" seed=\d+", "", case["name"])
        result = next((a for a in case["arms"] if a["arm"] == arm), None)
        if result is None:
            sys.exit(f"{path}: no arm {arm!r} in case {case['name']!r}")
        shapes[shape].append(min(result["goodput"], default=0.0))
        missed = case["misses"].get(arm, [])
        missing_cases += bool(missed)
        misses.update(m["target"] for m in missed)
    means = {shape: sum(g) / len(g) for shape, g in shapes.items()}
    return means, misses, missing_cases, len(cases)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    arm = sys.argv[3] if len(sys.argv) > 3 else "tidegate default"
    rows = int(sys.argv[4]) if len(sys.argv) > 4 else 12
    before, misses_before, missing_before, n = load(sys.argv[1], arm)
    after, misses_after, missing_after, n_after = load(sys.argv[2], arm)
    if before.keys() != after.keys() or n != n_after:
        sys.exit("the two runs are not of the same family (shapes or seeds differ)")

    def mean(shapes):
        return 100 * sum(shapes.values()) / len(shapes)

    moves = sorted((after[s] - before[s], s) for s in before)
    worse = [m for m in moves if m[0] < -MOVED]
    better = [m for m in reversed(moves) if m[0] > MOVED]
    print(f"{arm}: mean worst-window goodput {mean(before):.2f}% -> {mean(after):.2f}% "
          f"over {len(before)} shapes")
    print(f"shapes better by more than 2 points: {len(better)}; worse: {len(worse)}")
    print(f"case-seeds missing a target: {missing_before} -> {missing_after} of {n}")
    for target in sorted(set(misses_before) | set(misses_after)):
        print(f"  {target}: {misses_before[target]} -> {misses_after[target]}")
    for title, moved in (("worse", worse), ("better", better)):
        if moved:
            print(f"{title}:")
        for _, shape in moved[:rows]:
            print(f"  {100 * before[shape]:5.1f} -> {100 * after[shape]:5.1f}  {shape}")


main()
