"""Sorts the robustness sweep's misses of one arm into the groups docs/experiments/README.md
explains ("Why the default still misses"), so that the counts there can be re-run:

    target/release/tidegate sim sweep --arm "tidegate default" --seeds 24 --json > sweep.json
    python3 bench/sweep_misses.py sweep.json ["tidegate default"]

Each case-seed that misses a target goes to the first group whose rule matches it, by the
case's axes and the target missed; what no rule matches is counted as "other". A group is a
cause traced on a few of its cases, not proven on each: the rules only say where to look.
"""

import collections
import json
import sys

VARYING = {"Exponential", "Lognormal05", "Lognormal10", "Bimodal90", "Bimodal99", "Pareto25", "Pareto15"}
HEAVY = {"Bimodal90", "Bimodal99", "Pareto15", "Pareto25", "Lognormal10"}

# (name, rule on (case, target)), first match wins.
GROUPS = [
    ("two tiers at knees of 1-3: tier 1 waits past its timeout",
     lambda c, t: c["tiers"] and c["knee"] <= 3 and t == "tiers"),
    ("knees of 1-3, work that varies: settling, and what four waiting leave",
     lambda c, t: c["knee"] <= 3 and c["dist"] in VARYING),
    ("knees of 1-3, constant or uniform work: probes of one request",
     lambda c, t: c["knee"] <= 3),
    ("shed at 0.5x: the first limit (20) below the knee during slow start",
     lambda c, t: c["load"] == "Half" and t == "shed"),
    ("a capacity that halves and recovers",
     lambda c, t: c["load"] == "CapacityHalves"),
    ("contention beyond the knee",
     lambda c, t: c["contention"]),
    ("heavy tails at knees of 100-500: windows biased short",
     lambda c, t: c["knee"] >= 100 and c["dist"] in HEAVY),
    ("on/off bursts: the limit grown while half used",
     lambda c, t: c["load"] == "Bursts"),
    ("1 ms of work: no window within 50 work times",
     lambda c, t: c["work_ms"] == 1 and t == "settle"),
    ("20 ms of work: settling",
     lambda c, t: c["work_ms"] == 20 and t == "settle"),
]


def main():
    path = sys.argv[1]
    arm = sys.argv[2] if len(sys.argv) > 2 else "tidegate default"
    with open(path) as f:
        cases = json.load(f)
    missing = collections.Counter()
    targets = collections.defaultdict(collections.Counter)
    total = 0
    for case in cases:
        misses = [m["target"] for m in case["misses"].get(arm, [])]
        if not misses:
            continue
        total += 1
        for name, rule in GROUPS:
            matched = [t for t in misses if rule(case["case"], t)]
            if matched:
                break
        else:
            name, matched = "other", misses
        missing[name] += 1
        targets[name].update(matched)
    print(f"{arm}: {total} of {len(cases)} case-seeds miss a target")
    for name, _ in GROUPS + [("other", None)]:
        by_target = ", ".join(f"{t} {n}" for t, n in targets[name].most_common())
        print(f"{missing[name]:6}  {name}  ({by_target})")


if __name__ == "__main__":
    main()
