"""A peer engine timed on this machine: KunQuant (fused C++ kernels, f32).

KunQuant has been timed at 82 alphas in 22.2 s on this panel on a fast machine (one thread,
compute only).
This script builds KunQuant's own Alpha101 set (`KunQuant.predefined.Alpha101.all_alpha`,
the 82 it implements) into one fused library with its JIT (the machine's g++, about 10 s,
not timed) and times `runGraph` on the shipped panel, adjusted as conventions.md says, in
its time-major float32 layout, on its single-thread executor. Three runs; the first pays
for faulting in the output buffers.

    python3 -m pip install KunQuant pandas pyarrow            # a cp311 manylinux wheel
    python3 benches/peer/kunquant.py [--data FILE]

A speed reference only: f32, and KunQuant's own operator conventions (its `amount` is
close x volume here, there being no traded value in the data).
"""
import argparse
import time
from pathlib import Path

import numpy as np
from KunQuant.Driver import KunCompilerConfig
from KunQuant.jit import cfake
from KunQuant.Op import Builder, Input, Output
from KunQuant.Stage import Function
from KunQuant.predefined.Alpha101 import AllData, all_alpha
from KunQuant.runner import KunRunner

from alpha_pandas import load  # the panel adjusted as conventions.md says (beside this script)

ROOT = Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/sp500_daily.parquet"))
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    wide = load(args.data)
    n_dates, n_stocks = wide["close"].shape
    inputs = {k: np.ascontiguousarray(wide[k].to_numpy(), dtype=np.float32) for k in ["open", "high", "low", "close", "volume"]}
    inputs["amount"] = inputs["close"] * inputs["volume"]

    t0 = time.perf_counter()
    builder = Builder()
    with builder:
        data = AllData(open=Input("open"), close=Input("close"), high=Input("high"), low=Input("low"),
                       volume=Input("volume"), amount=Input("amount"))
        for alpha in all_alpha:
            Output(alpha(data), alpha.__name__)
    config = KunCompilerConfig(input_layout="TS", output_layout="TS")
    lib = cfake.compileit([("alpha101", Function(builder.ops), config)], "alphaloop_peer_alpha101", cfake.CppCompilerConfig())
    module = lib.getModule("alpha101")
    print(f"KunQuant: {len(all_alpha)} alphas compiled in {time.perf_counter() - t0:.1f} s (not timed below)")

    executor = KunRunner.createSingleThreadExecutor()
    for r in range(args.runs):
        t0 = time.perf_counter()
        out = KunRunner.runGraph(executor, module, inputs, 0, n_dates)
        print(f"KunQuant run {r + 1}: {len(out)} alphas in {time.perf_counter() - t0:.2f} s, compute only "
              f"({n_dates} dates x {n_stocks} stocks, f32, one thread)")


if __name__ == "__main__":
    main()
