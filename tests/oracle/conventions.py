"""An independent implementation of ../shared/spec/conventions.md, checked against alphaloop.

Written from the conventions, the operator catalogue (`alphaloop ops`) and the choices
documented in src/backtest/mod.rs, never from alphaloop's code, in plain numpy/pandas:
every window is computed from its own d values (correctly rounded sums, two-pass moments
in extended precision, no running sums), every metric by its textbook formula. It runs
`alphaloop eval --dump` / `--json` on the given data and compares:

* every operator on real fields, cell by cell (NaN pattern exactly, values to 1e-9
  relative), on inputs chosen so that the edge cases occur (exact zeros, ties, constant
  windows, negative bases, overflow, stocks not yet listed);
* every metric of four signals over the whole data and over a START:END period, and of
  two of them with other label horizons, gaps and costs;
* every alpha of a seed file (alpha101), whole, through a small parser of the notation.
  Where one differs, its sub-expressions are compared innermost first: the difference must
  start at a discontinuous operator (rank, ts_rank, arg-extremes, sign, comparisons,
  correlation) whose inputs agree, i.e. values that tie in exact arithmetic and that the
  two implementations' last-bit rounding orders differently. Anything else is a failure.

    python3 tests/oracle/conventions.py --alphaloop BIN [--data FILE] [--seeds TOML]

Exits 1 and lists every unexplained difference. Run by tests/oracle.rs.
"""
import argparse
import datetime as dt
import json
import re
import tomllib
import math
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
from numpy.lib.stride_tricks import sliding_window_view

ROOT = Path(__file__).resolve().parents[2]
NAN = np.nan


# ---- data, as conventions.md "Data" says ----
def wide(df, col, dates, syms):
    p = df.pivot(on="symbol", index="date", values=col, aggregate_function=None).sort("date")
    out = np.full((len(dates), len(syms)), NAN)
    pos = {s: i for i, s in enumerate(syms)}
    for s in p.columns[1:]:
        out[:, pos[s]] = p[s].cast(pl.Float64).fill_null(NAN).to_numpy()
    return out


def load(path):
    df = pl.read_parquet(path)
    dates = df["date"].unique().sort().to_list()
    syms = sorted(df["symbol"].unique().to_list())
    raw = {c: wide(df, c, dates, syms) for c in ["open", "high", "low", "close", "adj_close", "volume"]}
    f = raw["adj_close"] / raw["close"]
    w = {c: raw[c] * f for c in ["open", "high", "low", "close"]}
    w["volume"] = raw["volume"] / f
    w["returns"] = w["close"] / delay(w["close"], 1) - 1
    w["vwap"] = (w["high"] + w["low"] + w["close"]) / 3
    w["adv20"] = ts_mean(w["close"] * w["volume"], 20)
    sectors = pd.read_csv(Path(path).parent / "sp500_constituents.csv")
    sec = dict(zip(sectors.iloc[:, 0], sectors.iloc[:, 2]))
    groups = np.array([sec.get(s) for s in syms], dtype=object)
    return w, dates, syms, groups


def finite_or_nan(x):
    x = np.asarray(x, dtype=float)
    return np.where(np.isfinite(x), x, NAN)


# ---- operators ----
def delay(x, d):
    out = np.full_like(x, NAN)
    out[d:] = x[:-d]
    return out


def windows(x, d):
    """(T - d + 1, N, d) views of each window, and where all d values are finite."""
    v = sliding_window_view(x, d, axis=0)
    return v, np.isfinite(v).all(axis=2)


CHUNK = 16  # assets per slice of window computations (bounds memory on the full data)


def over_windows(xs, d, fn, fill=NAN):
    """fn(each input's d-day windows, where all of them are finite), CHUNK assets at a time,
    written at each window's last day; `fill` before the first full window."""
    out = np.full_like(xs[0], fill, dtype=np.asarray(fill).dtype)
    for a in range(0, xs[0].shape[1], CHUNK):
        views = [windows(x[:, a:a + CHUNK], d) for x in xs]
        out[d - 1:, a:a + CHUNK] = fn([v for v, _ in views], np.logical_and.reduce([ok for _, ok in views]))
    return out


def rolling(x, d, fn):
    """fn over every window of d days of each asset; NaN unless all d values are finite."""
    return finite_or_nan(over_windows([x], d, lambda v, ok: np.where(ok, fn(v[0]), NAN)))


def fsum(v):
    """Correctly rounded window sums (math.fsum): windows whose sums are equal in exact
    arithmetic get equal doubles, as they must for the ties and constant windows of the
    operators above them (a plain float sum can leave them an ulp apart)."""
    flat = v.reshape(-1, v.shape[-1])
    return np.array([math.fsum(w) if np.isfinite(w).all() else NAN for w in flat]).reshape(v.shape[:-1])


def ts_sum(x, d):
    return rolling(x, d, fsum)


def ts_mean(x, d):
    return rolling(x, d, lambda v: fsum(v) / d)


def dev(v):
    """Each window's deviations from its mean, in extended precision (x87 long double where
    numpy has it) and around the window's first value: the same numbers in exact
    arithmetic, and exact where the values are close (their differences are), where a
    mean of values that differ in their last bits is off by as much as the deviations."""
    u = v.astype(np.longdouble) - v[:, :, :1]
    return u - u.mean(axis=2, keepdims=True)


def ts_std(x, d):
    return rolling(x, d, lambda v: np.sqrt((dev(v) ** 2).sum(axis=2) / (d - 1)).astype(float))


def rolling2(x, y, d, fn):
    return finite_or_nan(over_windows([x, y], d, lambda v, ok: np.where(ok, fn(*v), NAN)))


def ts_cov(x, y, d):
    def f(vx, vy):
        dx, dy = dev(vx), dev(vy)
        # A constant side has covariance exactly 0 (a two-pass mean of equal values can be
        # an ulp off them, leaving ±1e-17 noise that would break ties further up).
        const = (np.ptp(vx, axis=2) == 0) | (np.ptp(vy, axis=2) == 0)
        return np.where(const, 0.0, ((dx * dy).sum(axis=2) / (d - 1)).astype(float))
    return rolling2(x, y, d, f)


def ts_corr(x, y, d):
    def f(vx, vy):
        dx, dy = dev(vx), dev(vy)
        const = (np.ptp(vx, axis=2) == 0) | (np.ptp(vy, axis=2) == 0)
        r = (dx * dy).sum(axis=2) / np.sqrt((dx * dx).sum(axis=2) * (dy * dy).sum(axis=2))
        return np.where(const, NAN, r.astype(float))
    return rolling2(x, y, d, f)


def ts_rank(x, d):
    def f(v):
        today = v[:, :, -1:]
        less = (v < today).sum(axis=2)
        eq = (v == today).sum(axis=2)
        return (less + (eq + 1) / 2) / d
    return rolling(x, d, f)


def decay_linear(x, d):
    w = np.arange(1, d + 1, dtype=float)  # oldest 1 .. today d
    return rolling(x, d, lambda v: (v * w).sum(axis=2) / w.sum())


def ts_argmax(x, d):
    return rolling(x, d, lambda v: v.argmax(axis=2) + 1.0)  # first occurrence: the oldest


def ts_argmin(x, d):
    return rolling(x, d, lambda v: v.argmin(axis=2) + 1.0)


def ts_ffill(x, d):
    out = np.full_like(x, NAN)
    for t in range(x.shape[0]):
        for a in range(x.shape[1]):
            for s in range(t, max(t - d, -1), -1):
                if np.isfinite(x[s, a]):
                    out[t, a] = x[s, a]
                    break
    return out


def line(x, d, which):
    """The least-squares line of each window against its days 1 (oldest) .. d (today):
    its slope, R² or today's residual; a constant window has slope 0, residual 0, R² NaN."""
    i = np.arange(1, d + 1, dtype=np.longdouble) - (d + 1) / 2

    def f(v):
        u = dev(v)
        b = (u * i).sum(axis=2) / (i * i).sum()
        const = np.ptp(v, axis=2) == 0
        if which == "slope":
            return np.where(const, 0.0, b.astype(float))
        if which == "resi":
            return np.where(const, 0.0, (u[:, :, -1] - b * i[-1]).astype(float))
        r = (u * i).sum(axis=2) / np.sqrt((i * i).sum() * (u * u).sum(axis=2))
        return np.where(const, NAN, (r * r).astype(float))
    return rolling(x, d, f)


def ts_quantile(x, d, q):
    return rolling(x, d, lambda v: np.quantile(v, q, axis=2))


def rank(x):
    return pd.DataFrame(x).rank(axis=1, pct=True).to_numpy()


def cs_zscore(x):
    out = np.full_like(x, NAN)
    for t in range(x.shape[0]):
        v = x[t][np.isfinite(x[t])]
        if len(v) >= 2 and np.ptp(v) > 0:
            out[t] = (x[t] - v.mean()) / v.std(ddof=1)
    return finite_or_nan(out)


def scale(x, a=1.0):
    s = np.nansum(np.abs(x), axis=1, keepdims=True)
    with np.errstate(all="ignore"):
        return finite_or_nan(x * a / s)


def indneutralize(x, groups):
    out = np.full_like(x, NAN)
    for g in set(groups):
        cols = groups == g
        sub = x[:, cols]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows give NaN, as they should
            m = np.nanmean(sub, axis=1, keepdims=True)
        out[:, cols] = sub - m
    return out


def cmp(fn):
    def f(x, y):
        with np.errstate(all="ignore"):
            return np.where(np.isnan(x) | np.isnan(y), NAN, fn(x, y).astype(float))
    return f


def div(x, y):
    with np.errstate(all="ignore"):
        return finite_or_nan(np.where(y == 0, NAN, x / y))


def power(x, y):
    with np.errstate(all="ignore"):
        return finite_or_nan(np.power(x, y))


def where(c, x, y):
    return np.where(np.isnan(c), NAN, np.where(c != 0, x, y))


def logical(fn):
    def f(x, y):
        return np.where(np.isnan(x) | np.isnan(y), NAN, fn(x != 0, y != 0).astype(float))
    return f


def cases(w, groups):
    """(expression, oracle) pairs: every operator of the catalogue on real fields, chosen so
    that the adversarial cases occur in the data (exact zeros, ties, constant windows,
    negative bases, NaN runs of stocks not yet listed)."""
    o, h, l, c, v, r = (w[k] for k in ["open", "high", "low", "close", "volume", "returns"])
    dc = c - delay(c, 1)  # exactly 0 on unchanged closes
    sgn = np.sign(r)  # three values: ties everywhere
    with np.errstate(all="ignore"):
        return [
            ("returns", lambda: r),
            ("vwap", lambda: w["vwap"]),
            ("adv20", lambda: w["adv20"]),
            ("close + open", lambda: c + o),
            ("close - open", lambda: c - o),
            ("close * volume", lambda: c * v),
            ("open / delta(close, 1)", lambda: div(o, dc)),
            ("returns ^ 2", lambda: power(r, 2.0)),
            ("returns ^ 0.5", lambda: power(r, 0.5)),
            ("delta(close, 1) ^ -1", lambda: power(dc, -1.0)),
            ("-returns", lambda: -r),
            ("close < open", lambda: cmp(np.less)(c, o)),
            ("close > open", lambda: cmp(np.greater)(c, o)),
            ("close <= delay(close, 1)", lambda: cmp(np.less_equal)(c, delay(c, 1))),
            ("close >= delay(close, 1)", lambda: cmp(np.greater_equal)(c, delay(c, 1))),
            ("close == delay(close, 1)", lambda: cmp(np.equal)(c, delay(c, 1))),
            ("close != delay(close, 1)", lambda: cmp(np.not_equal)(c, delay(c, 1))),
            ("sign(returns) && delta(close, 1)", lambda: logical(np.logical_and)(sgn, dc)),
            ("(returns > 0) || delta(close, 1)", lambda: logical(np.logical_or)(cmp(np.greater)(r, 0 * r), dc)),
            ("returns ? close : -open", lambda: where(r, c, -o)),
            ("abs(returns)", lambda: np.abs(r)),
            ("sign(delta(close, 1))", lambda: np.sign(dc)),
            ("log(returns)", lambda: finite_or_nan(np.where(r > 0, np.log(np.where(r > 0, r, 1.0)), NAN))),
            ("sqrt(returns)", lambda: finite_or_nan(np.where(r >= 0, np.sqrt(np.abs(r)), NAN))),
            ("exp(volume / 1e5)", lambda: finite_or_nan(np.exp(v / 1e5))),
            ("signedpower(delta(close, 1), 0.5)", lambda: finite_or_nan(np.sign(dc) * np.abs(dc) ** 0.5)),
            ("signedpower(delta(close, 1), 0)", lambda: finite_or_nan(np.sign(dc) * np.abs(dc) ** 0.0)),
            ("signedpower(delta(close, 1), -1)", lambda: finite_or_nan(np.sign(dc) * np.abs(dc) ** -1.0)),
            ("min(close, open)", lambda: np.minimum(c, o)),
            ("max(close, delay(open, 1))", lambda: np.maximum(c, delay(o, 1))),
            ("delay(close, 3)", lambda: delay(c, 3)),
            ("delta(close, 5)", lambda: c - delay(c, 5)),
            ("ts_sum(returns, 10)", lambda: ts_sum(r, 10)),
            ("sum(volume, 1)", lambda: ts_sum(v, 1)),
            ("ts_mean(close, 7.9)", lambda: ts_mean(c, 7)),
            ("stddev(returns, 20)", lambda: ts_std(r, 20)),
            ("ts_std(sign(delta(close, 1)), 3)", lambda: ts_std(np.sign(dc), 3)),
            ("correlation(close, volume, 10)", lambda: ts_corr(c, v, 10)),
            ("correlation(close, volume, 2)", lambda: ts_corr(c, v, 2)),
            ("covariance(rank(close), rank(volume), 5)", lambda: ts_cov(rank(c), rank(v), 5)),
            ("ts_corr(sign(delta(close, 1)), returns, 3)", lambda: ts_corr(np.sign(dc), r, 3)),
            ("covariance(high, low, 5)", lambda: ts_cov(h, l, 5)),
            ("ts_min(low, 10)", lambda: rolling(l, 10, lambda x: x.min(axis=2))),
            ("max(high, 10)", lambda: rolling(h, 10, lambda x: x.max(axis=2))),
            ("ts_argmax(close, 10)", lambda: ts_argmax(c, 10)),
            ("ts_argmin(close, 10)", lambda: ts_argmin(c, 10)),
            ("ts_argmax(sign(returns), 5)", lambda: ts_argmax(sgn, 5)),
            ("ts_argmin(sign(returns), 5)", lambda: ts_argmin(sgn, 5)),
            ("product(returns + 1, 5)", lambda: rolling(r + 1, 5, lambda x: x.prod(axis=2))),
            ("ts_rank(volume, 10)", lambda: ts_rank(v, 10)),
            ("ts_rank(sign(returns), 5)", lambda: ts_rank(sgn, 5)),
            ("decay_linear(returns, 10)", lambda: decay_linear(r, 10)),
            ("ts_zscore(close, 5)", lambda: rolling(c, 5, lambda x: np.where(np.ptp(x, axis=2) == 0, NAN, (dev(x)[:, :, -1] / np.sqrt((dev(x) ** 2).sum(axis=2) / 4)).astype(float)))),
            ("ts_ffill(delta(close, 1) == 0 ? returns / 0 : close, 3)", lambda: ts_ffill(np.where(dc == 0, NAN, np.where(np.isnan(dc), NAN, c)), 3)),
            ("ts_slope(close, 10)", lambda: line(c, 10, "slope")),
            ("ts_rsquare(close, 10)", lambda: line(c, 10, "rsquare")),
            ("ts_resi(close, 20)", lambda: line(c, 20, "resi")),
            ("ts_slope(sign(delta(close, 1)), 5)", lambda: line(np.sign(dc), 5, "slope")),
            ("ts_rsquare(sign(delta(close, 1)), 5)", lambda: line(np.sign(dc), 5, "rsquare")),
            ("ts_quantile(close, 20, 0.8)", lambda: ts_quantile(c, 20, 0.8)),
            ("ts_quantile(sign(returns), 5, 0.5)", lambda: ts_quantile(sgn, 5, 0.5)),
            ("greater(delta(close, 1), 0)", lambda: np.maximum(dc, 0.0)),
            ("less(delta(close, 1), 0)", lambda: np.minimum(dc, 0.0)),
            ("rank(close)", lambda: rank(c)),
            ("rank(sign(returns))", lambda: rank(sgn)),
            ("cs_zscore(returns)", lambda: cs_zscore(r)),
            ("scale(returns)", lambda: scale(r)),
            ("scale(returns, 0.3)", lambda: scale(r, 0.3)),
            ("indneutralize(returns, IndClass.sector)", lambda: indneutralize(r, groups)),
            ("indneutralize(returns, IndClass.subindustry)", lambda: indneutralize(r, groups)),
        ]


def ours(binary, data, expr, period="all", extra=()):
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "sig.parquet"
        p = subprocess.run([binary, "eval", "--data", str(data), "--period", period, "--json", "--dump", str(out), *extra, expr], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"alphaloop eval {expr!r} failed: {p.stderr.strip()}")
        df = pl.read_parquet(out)
    return df, json.loads(p.stdout)


def value_errors(got, want):
    """Per cell finite on both sides, the difference relative to the oracle's value, except
    for values under 1 % of the panel's largest, which are held to 1e-11 of that instead: a
    value near zero computed by cancellation (a correlation of 4e-5 between two nearly flat
    series) carries that much absolute noise. Returns (mask of those cells, errors)."""
    both = ~np.isnan(got) & ~np.isnan(want)
    g, x = got[both], want[both]
    scale_ = max(np.abs(x).max(initial=0), 1e-300)
    return both, np.abs(g - x) / np.maximum(np.abs(x), 1e-2 * scale_)


def compare(expr, got, want, tol=1e-9):
    """Mismatch descriptions (empty when equal)."""
    gn, wn = np.isnan(got), np.isnan(want)
    bad = []
    if (gn != wn).any():
        t, a = np.argwhere(gn != wn)[0]
        bad.append(f"{expr}: NaN pattern differs in {(gn != wn).sum()} cells, first at date {t} asset {a}: alphaloop {got[t, a]!r}, oracle {want[t, a]!r}")
    both, err = value_errors(got, want)
    if err.size and err.max() > tol:
        i = err.argmax()
        bad.append(f"{expr}: {(err > tol).sum()} cells differ by more than {tol:g} (relative), worst alphaloop {got[both][i]!r} vs oracle {want[both][i]!r}")
    return bad


# ---- metrics, as conventions.md "Label and metrics" and backtest/mod.rs's documented choices ----
def label(close, t0, t1, h, gap=1):
    """Forward return from close(t+gap) to close(t+gap+h) for dates t0..=t1; NaN where it
    needs a price after t1 (no label crosses the period's end)."""
    out = np.full_like(close, NAN)
    for t in range(t0, t1 + 1):
        if t + gap + h <= t1:
            out[t] = close[t + gap + h] / close[t + gap] - 1
    return finite_or_nan(out)


def pearson(a, b):
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    da, db = a - a.mean(), b - b.mean()
    return (da * db).sum() / math.sqrt((da * da).sum() * (db * db).sum())


def avg_rank(v):
    return pd.Series(v).rank(method="average").to_numpy()


def mean_sd(v):
    v = np.asarray(v, dtype=float)
    if len(v) == 0:
        return NAN, NAN
    return v.mean(), (v.std(ddof=1) if len(v) > 1 else NAN)


def metrics(sig, close, t0, t1, h=1, cost_bps=5.0, min_stocks=20, gap=1):
    lab = label(close, t0, t1, h, gap)
    ics, rics, net, turns, distinct, quint = [], [], [], [], [], []
    n_assets = sig.shape[1]
    book = np.zeros(n_assets)
    for t in range(t0, t1 + 1):
        ok = np.isfinite(sig[t]) & np.isfinite(lab[t])
        n = int(ok.sum())
        if n < min_stocks:
            continue
        idx = np.flatnonzero(ok)  # symbol order
        s, y = sig[t, idx], lab[t, idx]
        fin = sig[t][np.isfinite(sig[t])]
        distinct.append(len(np.unique(fin)) / len(fin))
        ic = pearson(s, y)
        if ic is not None:
            ics.append(ic)
        ric = pearson(avg_rank(s), avg_rank(y))
        if ric is not None:
            rics.append(ric)
        order = np.lexsort((idx, s))  # ascending by signal, ties by symbol
        q = [y[order[(k * n) // 5:((k + 1) * n) // 5]].mean() for k in range(5)]
        quint.append(q)
        legs = n // 5
        short = idx[order[:legs]]
        long_order = np.lexsort((idx, -s))  # descending by signal, ties by symbol
        long = idx[long_order[:legs]]
        w = np.zeros(n_assets)
        w[long] += 1 / legs
        w[short] -= 1 / legs
        turn = 0.5 * np.abs(w - book).sum()
        book = w
        turns.append(turn)
        gross = lab[t, long].mean() - lab[t, short].mean()
        net.append(gross - cost_bps / 1e4 * turn)
    m = {}
    m["ic"], sd = mean_sd(ics)
    m["icir"] = m["ic"] / sd
    m["ic_tstat"] = m["ic"] / sd * math.sqrt(len(ics))
    m["rank_ic"], rsd = mean_sd(rics)
    m["rank_icir"] = m["rank_ic"] / rsd
    mu, nsd = mean_sd(net)
    m["ann_return"] = mu * 252 / h
    m["sharpe"] = mu / nsd * math.sqrt(252 / h)
    cum = np.cumsum(net)
    m["max_drawdown"] = float((cum - np.maximum.accumulate(cum)).min())
    m["turnover"] = float(np.mean(turns))
    m["n_days"] = len(ics)  # documented: dates with a valid IC (the t-stat's sample size)
    m["distinctness"] = float(np.mean(distinct))
    cells = np.isfinite(lab[t0:t1 + 1])
    m["coverage"] = float((cells & np.isfinite(sig[t0:t1 + 1])).sum() / cells.sum())
    qr = np.array(quint)
    m["quintile_returns"] = list(qr.mean(axis=0))
    for hz in (5, 10, 20):
        lh = label(close, t0, t1, hz, gap)
        vals = []
        for t in range(t0, t1 + 1):
            ok = np.isfinite(sig[t]) & np.isfinite(lh[t])
            if ok.sum() >= min_stocks:
                ic = pearson(sig[t, ok], lh[t, ok])
                if ic is not None:
                    vals.append(ic)
        m[f"ic_h{hz}"] = mean_sd(vals)[0]
    return m


def compare_metrics(expr, period, got, want, tol=1e-9):
    bad = []
    for k, x in want.items():
        g = got.get(k)
        if k == "quintile_returns":
            pairs = list(zip(g, x))
        else:
            pairs = [(g, x)]
        for gv, xv in pairs:
            gv = NAN if gv is None else gv
            if math.isnan(xv) and math.isnan(gv):
                continue
            if math.isnan(xv) != math.isnan(gv) or abs(gv - xv) > tol * max(abs(xv), 1e-12):
                bad.append(f"{expr} [{period}] {k}: alphaloop {gv!r}, oracle {xv!r}")
    return bad


# ---- the expression notation, for whole formulas (alpha101) ----
TOKEN = re.compile(r"\s*(?:(\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)|([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_]+)?)|(\|\||&&|<=|>=|==|!=|[-+*/^<>?:(),]))")
BINARY = [["||"], ["&&"], ["<", ">", "<=", ">=", "==", "!="], ["+", "-"], ["*", "/"]]


def tokens(src):
    """(kind, value, start, end) of each token."""
    out, i = [], 0
    while src[i:].strip():
        m = TOKEN.match(src, i)
        if not m or m.end() == i:
            raise ValueError(f"cannot read {src[i:]!r}")
        num, name, op = m.groups()
        tok = ("num", float(num)) if num else ("name", name.lower()) if name else ("op", op)
        out.append(tok + (m.start(m.lastindex), m.end()))
        i = m.end()
    return out + [("end", None, len(src), len(src))]


class Node:
    """One sub-expression: its operator, source text, oracle value and inputs."""

    def __init__(self, op, text, value, children=()):
        self.op, self.text, self.value, self.children = op, text, value, list(children)

    def walk(self):
        """Inner nodes first."""
        for c in self.children:
            yield from c.walk()
        yield self


class Formula:
    """Recursive descent over the notation (precedence as src/expr/parser.rs defines it),
    evaluating as it parses; `tree()` gives the root [`Node`]."""

    def __init__(self, src, w, groups):
        self.src, self.t, self.i, self.w, self.groups = src, tokens(src), 0, w, groups

    def peek(self):
        return self.t[self.i][:2]

    def take(self, op=None):
        tok = self.t[self.i]
        if op is not None and tok[:2] != ("op", op):
            raise ValueError(f"expected {op!r} at {tok[2]} in {self.src!r}")
        self.i += 1
        return tok[:2]

    def node(self, start, op, value, children=()):
        return Node(op, self.src[self.t[start][2]:self.t[self.i - 1][3]], value, children)

    def tree(self):
        n = self.ternary()
        self.take() if self.peek()[0] == "end" else None
        return n

    def value(self):
        return self.tree().value

    def ternary(self):
        s = self.i
        c = self.binary(0)
        if self.peek() == ("op", "?"):
            self.take("?")
            x = self.ternary()
            self.take(":")
            y = self.ternary()
            return self.node(s, "?:", where(c.value, x.value, y.value), [c, x, y])
        return c

    def binary(self, level):
        if level == len(BINARY):
            return self.unary()
        s = self.i
        x = self.binary(level + 1)
        while self.peek()[0] == "op" and self.peek()[1] in BINARY[level]:
            op = self.take()[1]
            y = self.binary(level + 1)
            x = self.node(s, op, apply_binary(op, x.value, y.value), [x, y])
        return x

    def unary(self):
        s = self.i
        if self.peek() in (("op", "-"), ("op", "+")):
            op = self.take()[1]
            x = self.unary()
            return self.node(s, "neg", -x.value if op == "-" else x.value, [x])
        return self.power()

    def power(self):
        s = self.i
        x = self.atom()
        if self.peek() == ("op", "^"):
            self.take()
            y = self.unary()
            return self.node(s, "^", power(x.value, y.value), [x, y])
        return x

    def atom(self):
        s = self.i
        kind, v = self.take()
        if kind == "num":
            return self.node(s, "num", v)
        if kind == "op" and v == "(":
            x = self.ternary()
            self.take(")")
            return x
        if kind == "name":
            if self.peek() == ("op", "("):
                self.take("(")
                args = [self.ternary()]
                while self.peek() == ("op", ","):
                    self.take(",")
                    args.append(self.ternary())
                self.take(")")
                return self.node(s, v, call(v, [a.value for a in args], self.groups), args)
            if v.startswith("indclass."):
                return self.node(s, "group", v)
            if v.startswith("adv") and v[3:].isdigit():
                return self.node(s, "field", ts_mean(self.w["close"] * self.w["volume"], int(v[3:])))
            return self.node(s, "field", self.w[v])
        raise ValueError(f"unexpected {kind} {v!r} in {self.src!r}")


def apply_binary(op, x, y):
    with np.errstate(all="ignore"):
        if op == "/":
            return div(x, y)
        if op in ("+", "-", "*"):
            return finite_or_nan({"+": np.add, "-": np.subtract, "*": np.multiply}[op](x, y))
        if op in ("&&", "||"):
            return logical(np.logical_and if op == "&&" else np.logical_or)(x, y)
        fn = {"<": np.less, ">": np.greater, "<=": np.less_equal, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal}[op]
        return cmp(fn)(np.asarray(x, dtype=float), np.asarray(y, dtype=float))


def call(name, args, groups):
    win = lambda a: int(math.floor(a))
    one = {"rank": rank, "abs": np.abs, "sign": np.sign, "cs_zscore": cs_zscore,
           "log": lambda x: finite_or_nan(np.where(x > 0, np.log(np.where(x > 0, x, 1.0)), NAN))}
    if name in one:
        return one[name](args[0])
    ts = {"sum": ts_sum, "ts_sum": ts_sum, "ts_mean": ts_mean, "stddev": ts_std, "ts_std": ts_std,
          "ts_rank": ts_rank, "decay_linear": decay_linear, "ts_argmax": ts_argmax, "ts_argmin": ts_argmin,
          "ts_min": lambda x, d: rolling(x, d, lambda v: v.min(axis=2)),
          "ts_max": lambda x, d: rolling(x, d, lambda v: v.max(axis=2)),
          "product": lambda x, d: rolling(x, d, lambda v: v.prod(axis=2)),
          "delay": delay, "delta": lambda x, d: x - delay(x, d)}
    if name in ("min", "max") and not isinstance(args[1], np.ndarray):
        name = "ts_" + name
    if name in ts:
        return ts[name](args[0], win(args[1]))
    if name in ("correlation", "ts_corr"):
        return ts_corr(args[0], args[1], win(args[2]))
    if name in ("covariance", "ts_cov"):
        return ts_cov(args[0], args[1], win(args[2]))
    if name in ("min", "max"):
        return (np.minimum if name == "min" else np.maximum)(args[0], args[1])
    if name == "scale":
        return scale(args[0], *args[1:])
    if name == "signedpower":
        with np.errstate(all="ignore"):
            return finite_or_nan(np.sign(args[0]) * np.abs(args[0]) ** args[1])
    if name == "indneutralize":
        return indneutralize(args[0], groups)
    raise ValueError(f"operator {name} not in the oracle")


# Operators whose output jumps where inputs tie or cross a threshold: ranks and arg-extremes
# (the order of near-equal values), signs and comparisons (a value at the threshold), and
# correlation (NaN for a side constant up to the last bit; ±1 over two days).
NEAR = 1e-9  # relative: "equal up to last-bit noise"


def near(u, v, scale):
    return np.abs(u - v) <= NEAR * np.maximum(np.maximum(np.abs(u), np.abs(v)), scale)


def tie_cells(node):
    """Where `node`'s output may differ between two correct implementations: a boolean
    panel, True at cells whose inputs (the oracle's values) sit at a near-tie, or None
    when the operator is continuous."""
    args = [np.broadcast_to(np.asarray(c.value, dtype=float), node.value.shape) if isinstance(c.value, (np.ndarray, float)) else None for c in node.children]
    x = args[0] if args else None
    scale = 1e-3 * np.nanmax(np.abs(x)) if x is not None and np.isfinite(x).any() else 1e-300
    op = node.op
    if op == "rank":
        s = np.sort(x, axis=1)
        gaps = near(s[:, 1:], s[:, :-1], scale)
        out = np.zeros(x.shape, dtype=bool)
        for t in np.flatnonzero(gaps.any(axis=1)):
            tied = s[t, 1:][gaps[t]]
            out[t] = np.isin(x[t], np.concatenate([tied, s[t, :-1][gaps[t]]]))
        return out
    if op in ("ts_rank", "ts_argmax", "ts_argmin"):
        d = int(math.floor(float(node.children[1].value)))
        key = {"ts_rank": lambda v: v[:, :, -1], "ts_argmax": lambda v: v.max(axis=2), "ts_argmin": lambda v: v.min(axis=2)}[op]
        # The key and another value of its window.
        return over_windows([x], d, lambda v, _: near(v[0], key(v[0])[:, :, None], scale).sum(axis=2) >= 2, fill=False)
    if op == "sign":
        return near(x, 0.0, scale)
    if op in ("<", ">", "<=", ">=", "==", "!="):
        return near(x, args[1], scale)
    if op in ("correlation", "ts_corr"):
        d = int(math.floor(float(node.children[2].value)))
        flat = lambda v, _: np.ptp(v[0], axis=2) <= NEAR * np.max(np.abs(v[0]), axis=2)
        return over_windows([args[0]], d, flat, fill=False) | over_windows([args[1]], d, flat, fill=False)
    return None


def check_formulas(binary, data, path, w, groups, signal, tol=1e-9):
    """Every alpha of a seed file, whole, against the oracle. Where an alpha differs, its
    sub-expressions are compared too, innermost first, to find where the difference starts:
    it is explained when that node's inputs agree and every cell it differs in sits at a
    near-tie of its inputs (`tie_cells`): float noise in the last bits of values that tie
    in exact arithmetic, ordered differently by two correct implementations. Returns per alpha (id, first differing node or None,
    explained, share of cells that differ, share of cells whose NaN-ness differs)."""
    seeds = tomllib.loads(Path(path).read_text())["alpha"]
    out, cache, differ = [], {}, {}

    def ours_of(text):
        if text not in cache:
            cache[text] = signal(ours(binary, data, text)[0])
        return cache[text]

    def differs(node):
        if node.text not in differ:
            want = np.broadcast_to(np.asarray(node.value, dtype=float), w["close"].shape)
            differ[node.text] = bool(compare(node.text, ours_of(node.text), want, tol))
        return differ[node.text]

    for s in seeds:
        if re.search(r"\bcap\b", s["formula"]):
            continue
        cache.clear()  # one alpha's sub-expressions at a time (full-data panels are 19 MB)
        differ.clear()
        root = Formula(s["formula"], w, groups).tree()
        want = np.broadcast_to(np.asarray(root.value, dtype=float), w["close"].shape)
        got = ours_of(root.text)
        if not compare(s["id"], got, want, tol):
            out.append((s["id"], None, True, 0.0, 0.0))
            continue
        first = next(n for n in root.walk() if isinstance(n.value, np.ndarray) and n.op not in ("field", "num") and differs(n))
        explained = False
        if not any(isinstance(c.value, np.ndarray) and differs(c) for c in first.children):
            ties = tie_cells(first)
            if ties is not None:
                fw = np.broadcast_to(np.asarray(first.value, dtype=float), w["close"].shape)
                fg = ours_of(first.text)
                fn, wn_ = np.isnan(fg), np.isnan(fw)
                with np.errstate(all="ignore"):
                    moved = (fn != wn_) | (~fn & ~wn_ & ~near(fg, fw, 0.0))
                explained = bool(ties[moved].all())
        nan_differs = np.isnan(got) != np.isnan(want)
        _, err = value_errors(got, want)
        out.append((s["id"], Node(first.op, first.text, None), explained, float((err > tol).sum() + nan_differs.sum()) / got.size, float(nan_differs.mean())))
    return out

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--alphaloop", required=True)
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/sp500_sample.parquet"))
    ap.add_argument("--seeds", default=str(ROOT / "alpha_kb/seeds/alpha101.toml"))
    a = ap.parse_args()
    np.seterr(all="ignore")  # every oracle maps what the conventions make NaN explicitly
    w, dates, syms, groups = load(a.data)
    bad = []

    date_at = pl.DataFrame({"date": dates, "t": np.arange(len(dates))})
    sym_at = pl.DataFrame({"symbol": syms, "a": np.arange(len(syms))})

    def signal(df):
        """A dumped long-format signal as a dates x symbols panel (NaN where absent)."""
        got = np.full((len(dates), len(syms)), NAN)
        rows = df.filter(pl.col("value").is_not_null()).join(date_at, on="date").join(sym_at, on="symbol")
        got[rows["t"].to_numpy(), rows["a"].to_numpy()] = rows["value"].to_numpy()
        return got

    n = 0
    for expr, fn in cases(w, groups):
        df, _ = ours(a.alphaloop, a.data, expr)
        bad += compare(expr, signal(df), fn())
        n += 1
    # A mined alpha's name as an input (`alpha:ID`, resolved in the seed file).
    seeds = {x["id"]: x["formula"] for x in tomllib.loads(Path(a.seeds).read_text())["alpha"]}
    expr = "rank(alpha:alpha101_101) - alpha:alpha101_012"
    df, _ = ours(a.alphaloop, a.data, expr, extra=["--alphas", a.seeds])
    ref = lambda i: Formula(seeds[i], w, groups).value()
    bad += compare(expr, signal(df), rank(ref("alpha101_101")) - ref("alpha101_012"))
    # Groups from a user's `symbol,group` file: here by the symbol's first letter, with
    # groups of one stock (neutralised to exactly 0) and stocks left out (NaN).
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "groups.csv"
        mine = {s_: s_[0] for s_ in syms[:-3]}
        path.write_text("symbol,group\n" + "".join(f"{k},{v}\n" for k, v in mine.items()))
        expr = "indneutralize(returns, IndClass.industry)"
        df, _ = ours(a.alphaloop, a.data, expr, extra=["--groups", str(path)])
        g = np.array([mine.get(s_) for s_ in syms], dtype=object)
        want = indneutralize(w["returns"], g)
        want[:, g == None] = NAN  # noqa: E711 (elementwise)
        bad += compare(f"{expr} --groups", signal(df), want)
    n += 2
    print(f"operators: {n} expressions compared cell by cell on {len(dates)} dates x {len(syms)} stocks")

    periods = [("all", 0, len(dates) - 1)]
    # A START:END period inside the data: signals look back before it, labels stop at its end.
    s0 = next(i for i, x in enumerate(dates) if x >= dt.date(2016, 3, 1))
    s1 = max(i for i, x in enumerate(dates) if x <= dt.date(2017, 6, 30))
    periods.append(("2016-03-01:2017-06-30", s0, s1))
    m = 0
    for expr in ["-delta(close, 5)", "rank(volume) * sign(returns)", "ts_rank(close, 10)", "close > open"]:
        for period, t0, t1 in periods:
            df, got = ours(a.alphaloop, a.data, expr, period)
            bad += compare_metrics(expr, period, got, metrics(signal(df), w["close"], t0, t1))
            m += 1
    # The label's horizon and gap and the cost are settings.
    for expr in ["-delta(close, 5)", "close > open"]:
        for h, gap, cost in [(5, 1, 20.0), (1, 0, 5.0), (3, 2, 5.0)]:
            period, t0, t1 = periods[1]
            flags = ["--horizon", str(h), "--gap", str(gap), "--cost-bps", str(cost)]
            df, got = ours(a.alphaloop, a.data, expr, period, flags)
            bad += compare_metrics(f"{expr} {' '.join(flags)}", period, got, metrics(signal(df), w["close"], t0, t1, h=h, cost_bps=cost, gap=gap))
            m += 1
    print(f"metrics: {m} (signal, period) pairs compared")
    report = check_formulas(a.alphaloop, a.data, a.seeds, w, groups, signal)
    equal = sum(1 for r in report if r[1] is None)
    print(f"formulas: {len(report)} alphas of {a.seeds} compared cell by cell: {equal} equal in every cell; "
          f"the others, where their difference starts (cells that differ, cells whose NaN-ness differs):")
    for aid, first, explained, share, nan_share in report:
        if first is not None:
            why = "inputs agree; it differs only at their near-ties" if explained else "NOT EXPLAINED"
            print(f"  {aid}: {share:.3%}, {nan_share:.3%} from `{first.text}` ({first.op}): {why}")
            if not explained:
                bad.append(f"{aid}: differs from `{first.text}` ({first.op}) on, which is not a tie of a discontinuous operator")
    print(f"FORMULAS_EQUAL {equal}")
    for b in bad:
        print("MISMATCH", b)
    if bad:
        sys.exit(1)
    print("no unexplained differences")


if __name__ == "__main__":
    main()
