"""The command line shared by the scripts that write scenario files and run `tidegate sim
run` on them (`cold_start.py`, `drift.py`): `[BINARY] [--seeds N] [--dir DIR]`."""

import os


def parse(argv):
    """`(binary, seeds, keep)`: the binary (default `target/release/tidegate`), seeds 1 to
    `seeds` (default 3), and the directory to keep the scenario files in (created), or None
    for a temporary one."""
    args = list(argv)
    seeds = 3
    if "--seeds" in args:
        i = args.index("--seeds")
        seeds = int(args[i + 1])
        del args[i:i + 2]
    keep = None
    if "--dir" in args:
        i = args.index("--dir")
        keep = args[i + 1]
        del args[i:i + 2]
        os.makedirs(keep, exist_ok=True)
    binary = args[0] if args else "target/release/tidegate"
    return binary, seeds, keep
