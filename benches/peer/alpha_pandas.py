"""pandas baseline for the alphaloop engine benchmark, and an independent check of its values.

The same alphas are written directly in pandas following ../shared/spec/conventions.md
(wide dates x symbols frames, rolling windows with default min_periods). For each alpha it
prints the pandas compute time and, when an alphaloop binary is given, the largest
difference from `alphaloop eval --dump` on the same data.

    python3 benches/peer/alpha_pandas.py [--data FILE] [--alphaloop PATH] [--limit N]
"""
import argparse
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]


def load(path):
    df = pd.read_parquet(path)
    f = df["adj_close"] / df["close"]
    for c in ["open", "high", "low", "close"]:
        df[c] = df[c] * f
    df["volume"] = df["volume"] / f
    wide = {c: df.pivot(index="date", columns="symbol", values=c).sort_index() for c in ["open", "high", "low", "close", "volume"]}
    wide["returns"] = wide["close"] / wide["close"].shift(1) - 1
    wide["vwap"] = (wide["high"] + wide["low"] + wide["close"]) / 3
    wide["adv20"] = (wide["close"] * wide["volume"]).rolling(20).mean()
    return wide


# ---- operators, as conventions.md defines them ----
def rank(x):
    return x.rank(axis=1, pct=True)


def delay(x, d):
    return x.shift(d)


def delta(x, d):
    return x - x.shift(d)


def ts_sum(x, d):
    return x.rolling(d).sum()


def stddev(x, d):
    return x.rolling(d).std()


def correlation(x, y, d):
    c = x.rolling(d).corr(y)
    const = (x.rolling(d).std() == 0) | (y.rolling(d).std() == 0)
    return c.mask(const).replace([np.inf, -np.inf], np.nan)


def covariance(x, y, d):
    return x.rolling(d).cov(y)


def ts_rank(x, d):
    return x.rolling(d).rank(pct=True)


def ts_min(x, d):
    return x.rolling(d).min()


def ts_max(x, d):
    return x.rolling(d).max()


def scale(x):
    s = x.abs().sum(axis=1)
    return x.div(s.where(s > 0), axis=0)


def where(c, a, b):
    # NaN condition gives NaN (conventions: comparisons are NaN if an input is NaN)
    out = pd.DataFrame(np.where(c.fillna(0).astype(bool), a, b), index=c.index, columns=c.columns)
    return out.mask(c.isna())


def alphas(w):
    o, h, l, c, v, r, vw, adv20 = (w[k] for k in ["open", "high", "low", "close", "volume", "returns", "vwap", "adv20"])
    cmp = lambda a, b: (a < b).astype(float).mask(a.isna() | b.isna())
    return {
        "alpha101_003": ("(-1 * correlation(rank(open), rank(volume), 10))", lambda: -1 * correlation(rank(o), rank(v), 10)),
        "alpha101_004": ("(-1 * Ts_Rank(rank(low), 9))", lambda: -1 * ts_rank(rank(l), 9)),
        "alpha101_006": ("(-1 * correlation(open, volume, 10))", lambda: -1 * correlation(o, v, 10)),
        "alpha101_008": (
            "(-1 * rank(((sum(open, 5) * sum(returns, 5)) - delay((sum(open, 5) * sum(returns, 5)), 10))))",
            lambda: -1 * rank(ts_sum(o, 5) * ts_sum(r, 5) - delay(ts_sum(o, 5) * ts_sum(r, 5), 10)),
        ),
        "alpha101_009": (
            "((0 < ts_min(delta(close, 1), 5)) ? delta(close, 1) : ((ts_max(delta(close, 1), 5) < 0) ? delta(close, 1) : (-1 * delta(close, 1))))",
            lambda: where(cmp(0 * c, ts_min(delta(c, 1), 5)), delta(c, 1), where(cmp(ts_max(delta(c, 1), 5), 0 * c), delta(c, 1), -1 * delta(c, 1))),
        ),
        "alpha101_012": ("(sign(delta(volume, 1)) * (-1 * delta(close, 1)))", lambda: np.sign(delta(v, 1)) * (-1 * delta(c, 1))),
        "alpha101_013": ("(-1 * rank(covariance(rank(close), rank(volume), 5)))", lambda: -1 * rank(covariance(rank(c), rank(v), 5))),
        "alpha101_018": (
            "(-1 * rank(((stddev(abs((close - open)), 5) + (close - open)) + correlation(close, open, 10))))",
            lambda: -1 * rank(stddev((c - o).abs(), 5) + (c - o) + correlation(c, o, 10)),
        ),
        "alpha101_026": (
            "(-1 * ts_max(correlation(ts_rank(volume, 5), ts_rank(high, 5), 5), 3))",
            lambda: -1 * ts_max(correlation(ts_rank(v, 5), ts_rank(h, 5), 5), 3),
        ),
        "alpha101_028": (
            "scale(((correlation(adv20, low, 5) + ((high + low) / 2)) - close))",
            lambda: scale(correlation(adv20, l, 5) + (h + l) / 2 - c),
        ),
        "alpha101_033": ("rank((-1 * ((1 - (open / close))^1)))", lambda: rank(-1 * (1 - o / c) ** 1)),
        "alpha101_041": ("(((high * low)^0.5) - vwap)", lambda: (h * l) ** 0.5 - vw),
        "alpha101_101": ("((close - open) / ((high - low) + .001))", lambda: (c - o) / ((h - l) + 0.001)),
    }


def ours(binary, data, formula):
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "sig.parquet"
        subprocess.run([binary, "eval", "--data", str(data), "--period", "all", "--json", "--dump", str(out), formula], check=True, capture_output=True)
        s = pd.read_parquet(out).pivot(index="date", columns="symbol", values="value")
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/sp500_daily.parquet"))
    ap.add_argument("--alphaloop", help="alphaloop binary to compare values with")
    ap.add_argument("--limit", type=int, default=0)
    a = ap.parse_args()
    t = time.perf_counter()
    w = load(a.data)
    print(f"pandas {pd.__version__}: loaded {a.data} in {time.perf_counter() - t:.2f} s, panel {w['close'].shape}")
    total, n = 0.0, 0
    print(f"{'alpha':14} {'pandas s':>9} {'max |diff|':>11} {'NaN mismatches':>15}")
    for i, (aid, (formula, fn)) in enumerate(alphas(w).items()):
        if a.limit and i >= a.limit:
            break
        t = time.perf_counter()
        val = fn()
        dt = time.perf_counter() - t
        total, n = total + dt, n + 1
        diff, mism = "", ""
        if a.alphaloop:
            o = ours(a.alphaloop, a.data, formula)
            o.index = pd.to_datetime(o.index)
            p = val.copy()
            p.index = pd.to_datetime(p.index)
            o = o.reindex_like(p)
            both = p.notna() & o.notna()
            scale_ = np.nanmax(np.abs(p.where(both).values)) or 1.0
            diff = f"{np.nanmax(np.abs((p - o).where(both).values)) / max(scale_, 1.0):.1e}"
            mism = str(int((p.isna() != o.isna()).values.sum()))
        print(f"{aid:14} {dt:9.3f} {diff:>11} {mism:>15}")
    print(f"pandas mean compute time per alpha: {total / n:.3f} s over {n} alphas")


if __name__ == "__main__":
    main()
