"""alphaloop in notebooks: exact alpha metrics over daily market data.

    import alphaloop as al
    panel = al.load()                                   # the data the CLI finds
    al.evaluate("rank(delta(close, 5)) * -1", panel)    # the metrics `alphaloop eval --json` prints
    al.values("rank(delta(close, 5)) * -1", panel, wide=True)   # dates × symbols (pandas)

Every number comes from the same Rust code as the CLI's, bit for bit; the GIL is released
while it runs. Errors are this package's exceptions: ExpressionError (with the position
and a caret under it), DataError (naming the file or frame, column and row), KbError, all
AlphaloopError.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterable, Mapping, Optional, Union

import numpy as np
import polars as pl

from . import _native
from ._native import AlphaloopError, DataError, ExpressionError, KbError, Panel
from ._native import load as _load_file

__all__ = [
    "AlphaloopError",
    "DataError",
    "ExpressionError",
    "KB",
    "KbError",
    "Model",
    "Panel",
    "evaluate",
    "evaluate_many",
    "load",
    "train",
    "values",
]

PathLike = Union[str, "os.PathLike[str]"]


def load(source: Any = None, *, groups: Optional[PathLike] = None) -> Panel:
    """Loads long-format market data: date, symbol, open, high, low, close, adj_close and
    volume columns (the CLI's aliases accepted), one row per date and symbol.

    ``source``: a Parquet, CSV or TSV file; a pandas or polars DataFrame with the same
    columns (a date/symbol index counts as columns); or None for what the CLI would load
    (``$ALPHALOOP_DATA``, the config's ``data``, else the shipped S&P 500 set).
    ``groups``: a ``symbol,group`` CSV for ``indneutralize`` (default for a file:
    ``sp500_constituents.csv`` beside it). Raises DataError naming the file (or
    "DataFrame"), column and row of what is wrong.
    """
    g = None if groups is None else os.fspath(groups)
    if source is None:
        source = os.environ.get("ALPHALOOP_DATA") or None
    if source is None or isinstance(source, (str, os.PathLike)):
        return _load_file(None if source is None else os.fspath(source), g)
    rows, columns = _frame_columns(source)
    return _native._load_columns(rows, columns, g)


def _frame_columns(frame: Any):
    """A pandas or polars frame as (rows, [(name, kind, bytes, validity)]) for the loader:
    numbers and dates as flat buffers, text as one NUL-separated UTF-8 string."""
    if isinstance(frame, pl.LazyFrame):
        frame = frame.collect()
    if isinstance(frame, pl.DataFrame):
        return frame.height, [_polars_column(s) for s in frame.get_columns()]
    if type(frame).__module__.split(".")[0] == "pandas" and hasattr(frame, "columns"):
        if any(n is not None for n in frame.index.names):
            frame = frame.reset_index()
        return len(frame), [_pandas_column(str(name), frame[name]) for name in frame.columns]
    raise TypeError(f"load() takes a path, a pandas or polars DataFrame, or None; not {type(frame).__name__}")


def _text(values: Iterable[Any]) -> bytes:
    return "\0".join(values).encode("utf-8")


def _polars_column(s: "pl.Series"):
    dt = s.dtype
    if dt.is_integer():
        return s.name, "i64", s.cast(pl.Int64).fill_null(0).to_numpy().astype("<i8").tobytes(), _validity(s.is_not_null().to_numpy())
    if dt.is_float() or dt == pl.Boolean:
        return s.name, "f64", s.cast(pl.Float64).fill_null(float("nan")).to_numpy().astype("<f8").tobytes(), None
    if dt == pl.Date or isinstance(dt, pl.Datetime):
        days = s.cast(pl.Date).cast(pl.Int32)
        return s.name, "date", days.fill_null(0).to_numpy().astype("<i4").tobytes(), _validity(days.is_not_null().to_numpy())
    if dt.is_nested() or dt == pl.Object:
        raise DataError(f"DataFrame: column '{s.name}' has type {dt}; a column holds numbers, dates or text")
    text = s.cast(pl.Utf8, strict=False).fill_null("").str.replace_all("\0", "", literal=True)
    return s.name, "str", _text(text.to_list()), None


def _pandas_column(name: str, s: Any):
    kind = s.dtype.kind
    if kind in "iu" and s.hasnans:
        # A nullable integer column (pandas' Int64) with missing values.
        return name, "i64", s.fillna(0).to_numpy().astype("<i8").tobytes(), _validity(s.notna().to_numpy())
    if kind in "iu":
        return name, "i64", s.to_numpy().astype("<i8").tobytes(), None
    if kind in "fb":
        return name, "f64", s.to_numpy(dtype="float64", na_value=np.nan).astype("<f8").tobytes(), None
    if kind == "M":
        if getattr(s.dtype, "tz", None) is not None:
            s = s.dt.tz_localize(None)
        days = s.to_numpy().astype("datetime64[D]")
        valid = ~np.isnat(days)
        return name, "date", np.where(valid, days.astype("int64"), 0).astype("<i4").tobytes(), _validity(valid)
    text = ["" if v is None or (isinstance(v, float) and v != v) else str(v).replace("\0", "") for v in s.tolist()]
    return name, "str", _text(text), None


def _validity(mask: "np.ndarray") -> Optional[bytes]:
    return None if bool(mask.all()) else mask.astype(np.uint8).tobytes()


def evaluate(
    expr: str,
    panel: Panel,
    period: str = "valid",
    *,
    horizon: Optional[int] = None,
    gap: Optional[int] = None,
    cost_bps: Optional[float] = None,
) -> Dict[str, Any]:
    """Every metric of one alpha expression over a period, as a dict with the keys of
    ``alphaloop eval --json`` (rank_ic, ic, rank_icir, sharpe, turnover, max_drawdown,
    coverage, quintile_returns, ...; None where undefined).

    ``period``: train, valid, test, all, or "START:END" (ISO dates, either side may be
    empty); the data is cut at the period's end, so nothing later is read. ``horizon``,
    ``gap`` and ``cost_bps`` default to alphaloop.toml's, else 1, 1 and 5.
    """
    return json.loads(_panel(panel)._evaluate(expr, period, horizon, gap, cost_bps))


def evaluate_many(
    alphas: Union[PathLike, Iterable[str], Mapping[str, str]],
    panel: Panel,
    period: str = "valid",
    *,
    horizon: Optional[int] = None,
    gap: Optional[int] = None,
    cost_bps: Optional[float] = None,
) -> pl.DataFrame:
    """Many alphas at once, one row each, in the order given (``alphaloop eval --file``).

    ``alphas``: an alpha file (TOML with ``[[alpha]]`` id and formula, or .txt with one
    formula a line), a list of formulas (ids ``a1``, ``a2``, ...) or a dict id -> formula.
    Sub-expressions the alphas share run once. An alpha that does not compile has its
    message in the ``error`` column and no metrics; the others are scored.
    """
    ids, formulas, file = _alphas(alphas)
    rows = json.loads(_panel(panel)._evaluate_many(ids, formulas, file, period, horizon, gap, cost_bps))
    return _rows_frame(rows)


def _alphas(alphas: Any):
    """(ids, formulas, file) of an alpha file, a list of formulas or a dict id -> formula."""
    if isinstance(alphas, (str, os.PathLike)):
        return [], [], os.fspath(alphas)
    if isinstance(alphas, Mapping):
        return [str(k) for k in alphas], [_formula(v) for v in alphas.values()], None
    formulas = [_formula(f) for f in alphas]
    return [f"a{i + 1}" for i in range(len(formulas))], formulas, None


def _formula(f: Any) -> str:
    if not isinstance(f, str):
        raise TypeError(f"an alpha is a formula string, not {type(f).__name__}: {f!r}")
    return f


def _panel(panel: Any) -> Panel:
    if not isinstance(panel, Panel):
        raise TypeError(f"expected a Panel (alphaloop.load(...)), not {type(panel).__name__}")
    return panel


def _rows_frame(rows: list) -> pl.DataFrame:
    """The batch rows as a frame: id first, every metric as a column (floats, None where
    undefined), ``error`` and ``units`` as strings."""
    keys: list = []
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    for k in ("error", "units"):
        if k not in keys:
            keys.append(k)
    cols = {k: [r.get(k) for r in rows] for k in keys}
    schema: Dict[str, Any] = {}
    for k, v in cols.items():
        if k in ("id", "error", "units"):
            schema[k] = pl.Utf8
        elif any(isinstance(x, list) for x in v):
            schema[k] = pl.List(pl.Float64)
        elif k.startswith("n_"):
            schema[k] = pl.Int64
        else:
            schema[k] = pl.Float64
    return pl.DataFrame(cols, schema=schema)


def values(expr: str, panel: Panel, period: str = "valid", *, wide: bool = False):
    """One alpha's values over a period, computed as ``alphaloop eval --dump`` computes them.

    Long format (default): a polars DataFrame ``date, symbol, value`` with a row for every
    date of the period and every symbol, value null where the signal is not finite (the
    rows and values of ``--dump``). ``wide=True``: a pandas DataFrame, dates × symbols,
    NaN where not finite. Built from flat buffers, never a Python object per cell.
    """
    days_b, symbols, vals_b = _panel(panel)._values(expr, period)
    days = np.frombuffer(days_b, dtype="<i4")
    vals = np.frombuffer(vals_b, dtype="<f8").reshape(len(days), len(symbols))
    if wide:
        import pandas as pd

        index = pd.DatetimeIndex(days.astype("datetime64[D]"), name="date")
        return pd.DataFrame(vals, index=index, columns=pd.Index(symbols, name="symbol"), copy=False)
    n = len(symbols)
    sym = pl.Series("symbol", symbols, dtype=pl.Enum(symbols)).gather(np.tile(np.arange(n, dtype=np.uint32), len(days)))
    return pl.DataFrame(
        {
            "date": pl.Series("date", np.repeat(days, n)).cast(pl.Date),
            "symbol": sym,
            "value": pl.Series("value", vals.ravel(), nan_to_null=True),
        }
    )


# The metrics a record's table shows per split, in this order (every other metric stays in
# `KB.get`'s full record).
_RECORD_METRICS = ("rank_ic", "ic", "rank_icir", "icir", "sharpe", "ann_return", "turnover", "max_drawdown", "coverage")


def _flat(record: Mapping[str, Any]) -> Dict[str, Any]:
    """One row of a record table: its scalar fields, the status word, and each split's
    main metrics as ``SPLIT_METRIC``."""
    row: Dict[str, Any] = {
        "id": record["id"],
        "kind": record.get("kind"),
        "status": (record.get("status") or {}).get("state"),
        "family": record.get("family", ""),
        "generation": record.get("generation", 0),
        "run_id": record.get("run_id"),
        "horizon": record.get("horizon", 1),
        "idea": record.get("idea", ""),
        "code": record["code"],
    }
    metrics = record.get("metrics") or {}
    for split in ("train", "valid"):
        m = metrics.get(split) or {}
        for k in _RECORD_METRICS:
            v = m.get(k)
            row[f"{split}_{k}"] = float(v) if isinstance(v, (int, float)) else None
    return row


_RECORD_SCHEMA = {
    "id": pl.Utf8,
    "kind": pl.Utf8,
    "status": pl.Utf8,
    "family": pl.Utf8,
    "generation": pl.Int64,
    "run_id": pl.Utf8,
    "horizon": pl.Int64,
    "idea": pl.Utf8,
    "code": pl.Utf8,
    **{f"{s}_{k}": pl.Float64 for s in ("train", "valid") for k in _RECORD_METRICS},
}


def _records_frame(records: list, extra: Optional[Dict[str, list]] = None) -> pl.DataFrame:
    rows = [_flat(r) for r in records]
    cols: Dict[str, list] = dict(extra or {})
    schema: Dict[str, Any] = {k: pl.Float64 for k in cols}
    for k, t in _RECORD_SCHEMA.items():
        cols[k] = [r[k] for r in rows]
        schema[k] = t
    return pl.DataFrame(cols, schema=schema)


class KB:
    """A knowledge base: a directory (the embedded store), ``qdrant://host:port/collection``
    (a server), or ``None`` (``$ALPHALOOP_KB``, the config's ``kb``, else alpha_kb/store).
    Never creates one.

    An embedded store is locked while open, as it is for the CLI: a second opener (a
    running ``alphaloop mine``, another notebook) gets KbError "is in use". ``close()``, or
    a ``with`` block, releases it.
    """

    def __init__(self, location: Optional[PathLike] = None):
        if location is None:
            location = os.environ.get("ALPHALOOP_KB") or None
        loc = None if location is None else (location if isinstance(location, str) else os.fspath(location))
        self._kb = _native.Kb(loc)

    @property
    def location(self) -> str:
        return self._kb.location

    def __repr__(self) -> str:
        return repr(self._kb)

    def __enter__(self) -> "KB":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Releases the store (and an embedded store's lock)."""
        self._kb.close()

    def search(self, text: str, n: int = 10, *, status: str = "all", family: Optional[str] = None) -> pl.DataFrame:
        """Semantic search over ideas, in the order the writer retrieves them
        (``kb search``): ``score`` and ``relevance`` (cosine to the text) then the record."""
        hits = json.loads(self._kb._search(text, n, status, family))
        return _records_frame([h["record"] for h in hits], {"score": [h["score"] for h in hits], "relevance": [h["relevance"] for h in hits]})

    def similar(self, id: str, n: int = 10) -> pl.DataFrame:
        """Records whose signals behave like ``id``'s (``kb similar``)."""
        hits = json.loads(self._kb._similar(id, n))
        return _records_frame([h["record"] for h in hits], {"score": [h["score"] for h in hits], "relevance": [h["relevance"] for h in hits]})

    def top(self, by: str = "rank_ic", split: str = "valid", n: int = 20, *, status: str = "accepted", family: Optional[str] = None) -> pl.DataFrame:
        """The best records by a metric on train or valid (``kb top``); smaller is better
        for turnover and max_drawdown."""
        return _records_frame(json.loads(self._kb._top(by, split, n, status, family)))

    def get(self, id: str) -> Optional[Dict[str, Any]]:
        """The full record (``kb show --json``), or None."""
        r = self._kb._get(id)
        return None if r is None else json.loads(r)

    def stats(self) -> Dict[str, Any]:
        """Counts by status, family and generation, the best valid values, growth by day
        (``kb stats --json``)."""
        return json.loads(self._kb._stats())

    def to_polars(self, status: str = "all", *, family: Optional[str] = None) -> pl.DataFrame:
        """Every record (or those of a status and family), one row each."""
        return _records_frame(json.loads(self._kb._records(status, family)))


class Model:
    """A combined model (XGBoost over alphas), as ``alphaloop train`` makes it: ``predict``
    scores stocks on a date, ``save`` writes the file ``alphaloop predict --model`` reads,
    ``Model.load`` reads one back. ``report`` is what ``train --json`` prints."""

    def __init__(self, native: "_native.Model"):
        self._m = native

    @staticmethod
    def load(path: PathLike) -> "Model":
        return Model(_native.Model.load(os.fspath(path)))

    def save(self, path: PathLike) -> None:
        self._m.save(os.fspath(path))

    @property
    def features(self) -> Dict[str, str]:
        """id -> formula, in the model's order."""
        return dict(self._m.features)

    @property
    def label(self) -> Dict[str, int]:
        h, g = self._m.label
        return {"horizon": h, "gap": g}

    @property
    def report(self) -> Optional[Dict[str, Any]]:
        r = self._m._report
        return None if r is None else json.loads(r)

    def __repr__(self) -> str:
        return repr(self._m)

    def predict(self, panel: Panel, date: Optional[str] = None) -> pl.DataFrame:
        """Scores per stock on a date (ISO; default the panel's last), best first:
        ``date, symbol, score``, as ``alphaloop predict`` gives them."""
        day, symbols, scores = self._m._predict(_panel(panel), date)
        n = len(symbols)
        return pl.DataFrame(
            {"date": pl.Series("date", [day] * n).str.to_date(), "symbol": pl.Series("symbol", symbols, dtype=pl.Utf8), "score": pl.Series("score", scores, dtype=pl.Float64)}
        )


def train(
    features: Union[PathLike, Iterable[str], Mapping[str, str]],
    panel: Panel,
    *,
    horizon: Optional[int] = None,
    gap: Optional[int] = None,
    cost_bps: Optional[float] = None,
    **settings: Any,
):
    """Trains the combined model over alphas, fit on train and early-stopped on valid (as
    ``alphaloop train --seeds FILE --no-seed-baseline``); returns ``(report, model)``, the
    report being the dict ``train --json`` prints (train, valid and test IC, Rank IC,
    Sharpe; the best single feature and the equal-weight combination beside it).

    ``features``: an alpha file, a list of formulas or a dict id -> formula (e.g.
    ``dict(zip(kb.top(n=20)["id"], kb.top(n=20)["code"]))``). ``settings``: transform,
    target, stop_on, max_rounds, patience, eta, max_depth, lambda, alpha, subsample,
    colsample, min_child_weight, seed, refit_months (docs/model.md).
    """
    ids, formulas, file = _alphas(features)
    report, native = _native._train(_panel(panel), ids, formulas, file, json.dumps(settings), horizon, gap, cost_bps)
    return json.loads(report), Model(native)
