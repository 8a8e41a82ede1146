"""A peer engine timed on this machine: py-alpha-lib (Rust kernels behind numpy).

py-alpha-lib has been timed at 100 alphas in 23.7 s on this panel on a fast machine (one
thread, compute only). Machines of this project's kind differ by up to 1.6x by the hour, so a
figure for alphaloop means little without the peer timed in the same hour; this script
is that peer.

The formulas are ../shared/reference/alpha101.tsv, turned into Python by the wheel's own
transpiler (`alpha.lang`, with its common-subexpression pass); the operators map onto the
library's kernels below (windows floored as conventions.md says, `rank` the cross-
sectional CC_RANK, `indneutralize` its NEUTRALIZE by GICS sector). The data is the shipped
panel adjusted as conventions.md says, in the library's asset-major layout. Timed: the
alphas' compute only (loading excluded), each result materialised as a numpy array.

    python3.12 -m pip install py-alpha-lib pandas pyarrow      # the wheel needs Python >= 3.11
    RAYON_NUM_THREADS=1 python3.12 benches/peer/py_alpha_lib.py [--data FILE]

The values are not compared with alphaloop's: the library's conventions differ (min-rank
ties in its rolling rank, its own NaN rules), so this is a speed reference only.
"""
import argparse
import io
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import alpha
from alpha.lang.to_python import to_python_file

from alpha_pandas import load  # the panel adjusted as conventions.md says (beside this script)

ROOT = Path(__file__).resolve().parents[2]


def window(d):
    return max(1, math.floor(d))


def f64(a):
    return np.asarray(a, dtype=np.float64)


class Ctx:
    """What the transpiled functions call: fields by name, operators as methods."""

    def __init__(self, wide, sectors):
        self.nd, self.na = wide["close"].shape
        # Each stock is one group of the flat arrays; windows yield NaN until full (as
        # conventions.md and pandas' default min_periods).
        alpha.set_ctx(groups=self.na, flags=alpha.FLAG_STRICTLY_CYCLE)
        # Asset-major flat arrays: each stock's series contiguous (the library's layout).
        self.fields = {k.upper(): np.ascontiguousarray(wide[k].to_numpy().T.reshape(-1)) for k in ["open", "high", "low", "close", "volume"]}
        close = self.fields["CLOSE"]
        self.fields["RETURNS"] = close / alpha.REF(close, 1) - 1
        self.fields["VWAP"] = (self.fields["HIGH"] + self.fields["LOW"] + close) / 3
        codes = {s: i for i, s in enumerate(sorted(set(sectors.values())))}
        group = np.array([codes.get(sectors.get(s), -1) for s in wide["close"].columns], dtype=np.float64)
        self.fields["INDCLASS"] = np.repeat(group, self.nd)

    def __call__(self, name):
        if name.startswith("ADV"):
            return alpha.MA(self.fields["CLOSE"] * self.fields["VOLUME"], int(name[3:]))
        if name.startswith("INDCLASS"):
            return self.fields["INDCLASS"]
        return self.fields[name]  # CAP: KeyError, as alphaloop refuses it too

    def SUM(self, a, d): return alpha.SUM(f64(a), window(d))
    def STDDEV(self, a, d): return alpha.STDDEV(f64(a), window(d))
    def CORRELATION(self, a, b, d): return alpha.CORR2(f64(a), f64(b), window(d))
    def COVARIANCE(self, a, b, d): return alpha.COV(f64(a), f64(b), window(d))
    def TS_RANK(self, a, d): return alpha.RANK(f64(a), window(d))
    def PRODUCT(self, a, d): return alpha.PRODUCT(f64(a), window(d))
    def TS_MIN(self, a, d): return alpha.LLV(f64(a), window(d))
    def TS_MAX(self, a, d): return alpha.HHV(f64(a), window(d))
    def TS_ARGMAX(self, a, d): return window(d) - alpha.HHVBARS(f64(a), window(d))
    def TS_ARGMIN(self, a, d): return window(d) - alpha.LLVBARS(f64(a), window(d))
    def DECAY_LINEAR(self, a, d): return alpha.LWMA(f64(a), window(d))
    def DELAY(self, a, d): return alpha.REF(f64(a), window(d))
    def DELTA(self, a, d): return a - alpha.REF(f64(a), window(d))
    # min(x, d) / max(x, d) with a number are the paper's ts_min / ts_max.
    def MIN(self, a, b): return self.TS_MIN(a, b) if np.isscalar(b) else np.minimum(a, b)
    def MAX(self, a, b): return self.TS_MAX(a, b) if np.isscalar(b) else np.maximum(a, b)
    def RANK(self, a): return alpha.CC_RANK(f64(a))
    def INDNEUTRALIZE(self, a, g): return alpha.NEUTRALIZE(g, f64(a))

    def SCALE(self, a, k=1):
        m = f64(a).reshape(self.na, self.nd)
        return (m * k / np.nansum(np.abs(m), axis=0)).reshape(-1)

    def SIGNEDPOWER(self, a, p): return np.sign(a) * np.power(np.abs(a), p)
    def LOG(self, a): return np.log(a)
    def ABS(self, a): return np.abs(a)
    def SIGN(self, a): return np.sign(a)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/sp500_daily.parquet"))
    ap.add_argument("--formulas", default=str(ROOT.parent / "shared/reference/alpha101.tsv"))
    args = ap.parse_args()

    formulas = [line.split("\t", 1)[1] for line in Path(args.formulas).read_text().splitlines()[1:] if "\t" in line]
    code = io.StringIO()
    to_python_file(formulas, "alpha_", fp=code, name_convertor=str.upper)
    generated = {}
    exec(compile(code.getvalue(), "<alpha.lang>", "exec"), generated)

    cons = pd.read_csv(Path(args.data).parent / "sp500_constituents.csv")
    sector_col = next(c for c in cons.columns if "sector" in c.lower())
    ctx = Ctx(load(args.data), dict(zip(cons[cons.columns[0]].astype(str), cons[sector_col].astype(str))))

    total, done, failed = 0.0, 0, []
    width = math.ceil(math.log10(len(formulas)))
    with np.errstate(all="ignore"):
        for i in range(1, len(formulas) + 1):
            fn = generated[f"alpha_{i:0{width}d}"]
            t0 = time.perf_counter()
            try:
                v = f64(fn(ctx))
            except Exception as e:  # noqa: BLE001 (a formula the library cannot run is reported, not fatal)
                failed.append(f"{i}: {e!r}")
                continue
            total += time.perf_counter() - t0
            if v.size != ctx.na * ctx.nd:
                failed.append(f"{i}: shape {v.shape}")
                continue
            done += 1
    print(f"py-alpha-lib: {done} alphas in {total:.2f} s, compute only ({ctx.nd} dates x {ctx.na} stocks)")
    for f in failed:
        print("  not run:", f)


if __name__ == "__main__":
    main()
