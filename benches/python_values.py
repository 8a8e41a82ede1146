"""`al.values` of one alpha over the full shipped data into a pandas wide frame, against
the CLI evaluating the same alpha: is the conversion into Python frames cheap beside the
evaluation? Median of REPS runs each, after one warm-up (the file in the page cache).

    . scripts/env.sh && python3 benches/python_values.py [REPS]

Prints one JSON object: the CLI's `eval --period all` wall time (load, evaluation,
metrics), the package's load, `values(wide=True)` and `values` (long polars) times, and the
ratio of load + values(wide) to the CLI's.
"""

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import alphaloop as al

EXPR = "rank(ts_corr(rank(close), rank(volume), 10)) * -1"
REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "sp500_daily.parquet"
CLI = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "release" / "alphaloop"


def median_time(f, reps: int) -> float:
    f()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    cli = median_time(lambda: subprocess.run([str(CLI), "eval", "--data", str(DATA), "--period", "all", "--json", EXPR], check=True, capture_output=True), reps)
    load = median_time(lambda: al.load(DATA), reps)
    panel = al.load(DATA)
    wide = median_time(lambda: al.values(EXPR, panel, "all", wide=True), reps)
    long = median_time(lambda: al.values(EXPR, panel, "all"), reps)
    frame = al.values(EXPR, panel, "all", wide=True)
    print(json.dumps({
        "expr": EXPR,
        "cells": int(frame.size),
        "cli_eval_s": round(cli, 3),
        "load_s": round(load, 3),
        "values_wide_s": round(wide, 3),
        "values_long_s": round(long, 3),
        "load_plus_wide_over_cli": round((load + wide) / cli, 2),
    }))


if __name__ == "__main__":
    main()
