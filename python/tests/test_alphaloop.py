"""The Python package against the CLI on the shipped sample (2015-2018, 60 stocks): the
same numbers bit for bit, the package's own errors, and an interpreter that survives bad
input."""

import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import alphaloop as al

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO.parent / "shared" / "data" / "sp500_sample.parquet"
EXPR = "rank(delta(close, 5)) * -1"


def cli() -> str:
    """The CLI binary the test suite built (scripts/test builds it before running these)."""
    exe = os.environ.get("ALPHALOOP_BIN") or str(Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "release" / "alphaloop")
    assert Path(exe).is_file(), f"no alphaloop binary at {exe}: build it first (scripts/test does)"
    return exe


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([cli(), *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="session", autouse=True)
def sample_config(tmp_path_factory):
    """Both sides under one config (as the CLI's tests): the sample's own splits, train
    2015-2016, valid 2017, test 2018, through $ALPHALOOP_CONFIG, which both read."""
    cfg = tmp_path_factory.mktemp("config") / "alphaloop.toml"
    cfg.write_text('[splits]\ntrain = ["2015-01-01", "2016-12-31"]\nvalid = ["2017-01-01", "2017-12-31"]\ntest = ["2018-01-01", "2018-12-31"]\n')
    old = os.environ.get("ALPHALOOP_CONFIG")
    os.environ["ALPHALOOP_CONFIG"] = str(cfg)
    yield cfg
    if old is None:
        del os.environ["ALPHALOOP_CONFIG"]
    else:
        os.environ["ALPHALOOP_CONFIG"] = old


@pytest.fixture(autouse=True)
def elsewhere(tmp_path, monkeypatch):
    """Each test in its own directory, with no data or KB named by the environment."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ALPHALOOP_DATA", raising=False)
    monkeypatch.delenv("ALPHALOOP_KB", raising=False)


@pytest.fixture(scope="module")
def panel():
    return al.load(SAMPLE)


def same(a, b) -> bool:
    """Equal numbers bit for bit, None (JSON null) equal to None, lists and dicts item by item."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return np.float64(a).tobytes() == np.float64(b).tobytes()
    return a == b


def test_load_reads_the_sample(panel):
    assert len(panel.symbols) == 60 and panel.symbols == sorted(panel.symbols)
    assert {"open", "high", "low", "close", "volume"} <= set(panel.fields)
    days = np.frombuffer(panel._days, dtype="<i4")
    assert str(days[0].astype("datetime64[D]")) == "2015-01-02"
    assert len(panel) == len(days) * 60
    assert "60 symbols" in repr(panel) and "sp500_sample.parquet" in panel.source
    assert [s[0] for s in panel.splits_iso] == ["train", "valid", "test"]


def test_evaluate_equals_the_cli(panel, tmp_path):
    for period in ["train", "valid", "2016-03-01:2016-09-30"]:
        got = al.evaluate(EXPR, panel, period)
        out = run_cli("eval", "--data", str(SAMPLE), "--period", period, "--json", EXPR, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert same(got, json.loads(out.stdout)), period
    assert math.isfinite(got["rank_ic"]) and got["n_days"] > 100


def test_label_settings_are_the_clis(panel, tmp_path):
    got = al.evaluate(EXPR, panel, horizon=5, gap=0, cost_bps=20)
    out = run_cli("eval", "--data", str(SAMPLE), "--horizon", "5", "--gap", "0", "--cost-bps", "20", "--json", EXPR, cwd=tmp_path)
    assert same(got, json.loads(out.stdout))
    assert not same(got, al.evaluate(EXPR, panel))
    with pytest.raises(ValueError, match="horizon 0"):
        al.evaluate(EXPR, panel, horizon=0)
    with pytest.raises(ValueError, match="gap -1"):
        al.evaluate(EXPR, panel, gap=-1)
    with pytest.raises(TypeError, match="expected a Panel"):
        al.evaluate(EXPR, None)
    with pytest.raises(ValueError, match="basis points"):
        al.evaluate(EXPR, panel, cost_bps=-1)
    with pytest.raises(ValueError, match="not train, valid, test"):
        al.evaluate(EXPR, panel, "later")


def test_evaluate_many_rows_in_order(panel, tmp_path):
    f = tmp_path / "a.toml"
    f.write_text('[[alpha]]\nid = "rev5"\nformula = "rank(delta(close, 5)) * -1"\n\n[[alpha]]\nid = "bad"\nformula = "rank(clsoe)"\n\n[[alpha]]\nid = "seed"\nformula = "alpha:alpha101_001"\n')
    df = al.evaluate_many(f, panel)
    assert df["id"].to_list() == ["rev5", "bad", "seed"]
    assert "did you mean 'close'" in df["error"][1] and df["rank_ic"][1] is None
    out = run_cli("eval", "--data", str(SAMPLE), "--file", str(f), "--json", cwd=tmp_path)
    rows = json.loads(out.stdout)
    for i, r in enumerate(rows):
        for k, v in r.items():
            assert same(df[k][i] if not isinstance(v, list) else df[k][i].to_list(), v), (r["id"], k)
    by_list = al.evaluate_many([EXPR, "rank(volume)"], panel)
    assert by_list["id"].to_list() == ["a1", "a2"]
    assert same(by_list["rank_ic"][0], df["rank_ic"][0])
    by_dict = al.evaluate_many({"x": "rank(volume)"}, panel, "test")
    assert by_dict["id"].to_list() == ["x"] and by_dict["rank_ic"][0] is not None


def test_values_equal_the_cli_dump_bit_for_bit(panel, tmp_path):
    dump = tmp_path / "dump.parquet"
    out = run_cli("eval", "--data", str(SAMPLE), "--period", "valid", "--dump", str(dump), EXPR, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    want = pl.read_parquet(dump)
    got = al.values(EXPR, panel, "valid")
    assert got.columns == ["date", "symbol", "value"] and got.height == want.height
    assert got["date"].to_list() == want["date"].to_list()
    assert got["symbol"].cast(pl.Utf8).to_list() == want["symbol"].to_list()
    assert got["value"].is_null().to_list() == want["value"].is_null().to_list()
    a, b = got["value"].fill_null(0.0).to_numpy(), want["value"].fill_null(0.0).to_numpy()
    assert np.array_equal(a.view(np.int64), b.view(np.int64))


def test_values_wide_is_dates_by_symbols(panel):
    pd = pytest.importorskip("pandas")
    long = al.values(EXPR, panel, "test")
    wide = al.values(EXPR, panel, "test", wide=True)
    assert isinstance(wide, pd.DataFrame) and wide.shape == (long.height // 60, 60)
    assert list(wide.columns) == panel.symbols and str(wide.index[0].date()) >= "2018-01-01"
    first = long.filter(pl.col("date") == long["date"][0])
    assert np.array_equal(np.nan_to_num(first["value"].to_numpy(), nan=-9.0), np.nan_to_num(wide.iloc[0].to_numpy(), nan=-9.0))
    wide.iloc[0, 0] = 1.0  # a notebook's frame is writable


def test_expression_errors_point_at_the_fault(panel):
    with pytest.raises(al.ExpressionError) as e:
        al.evaluate("rank(delta(clsoe, 5))", panel)
    err = e.value
    assert (err.position, err.length, err.expression) == (12, 5, "rank(delta(clsoe, 5))")
    assert "did you mean 'close'" in str(err) and "^^^^^" in str(err)
    assert isinstance(err, al.AlphaloopError)
    with pytest.raises(al.ExpressionError):
        al.values("rank(", panel)


def test_data_errors_name_the_file_and_column(tmp_path):
    with pytest.raises(al.DataError, match="not found"):
        al.load(tmp_path / "nope.parquet")
    csv = tmp_path / "prices.csv"
    csv.write_text("date,symbol,open,high,low,adj_close,volume\n2020-01-02,AAA,1,1,1,1,100\n")
    with pytest.raises(al.DataError, match=r"prices.csv: missing column 'close'"):
        al.load(csv)
    csv.write_text("date,symbol,open,high,low,close,adj_close,volume\n2020-01-02,AAA,1,1,1,x,1,100\n")
    with pytest.raises(al.DataError, match=r"column 'close', row 1"):
        al.load(csv)
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(al.DataError, match="no rows"):
        al.load(tmp_path / "empty.csv")


def test_a_period_outside_the_data_is_a_data_error(panel):
    with pytest.raises(al.DataError, match="has no dates"):
        al.evaluate(EXPR, panel, "1990-01-01:1990-12-31")


def test_the_gil_is_released_while_rust_computes(panel):
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    try:
        start = time.perf_counter()
        al.evaluate_many([f"rank(ts_corr(close, volume, {w}))" for w in range(5, 65)], panel, "all")
        spent = time.perf_counter() - start
    finally:
        stop.set()
        t.join()
    during = [x for x in ticks if start <= x <= start + spent]
    # With the GIL held throughout, the thread could not tick at all while Rust ran (a
    # tick or two at the edges at most); released, it ticks whenever the OS runs it.
    assert spent > 0.05 and len(during) >= 10, (spent, len(during))


BAD_INPUTS = [
    "al.evaluate('rank(' * 5000 + 'close' + ')' * 5000, p)",
    "al.evaluate('\\x00\\xff' * 100, p)",
    "al.evaluate('ts_mean(close, 99999999999999999999)', p)",
    "al.evaluate('delay(close, -5)', p)",
    "al.evaluate('', p)",
    "al.evaluate(None, p)",
    "al.evaluate(EXPR, None)",
    "al.evaluate(EXPR, p, horizon=-1)",
    "al.evaluate(EXPR, p, cost_bps=float('nan'))",
    "al.evaluate_many([], p)",
    "al.evaluate_many([1, 2], p)",
    "al.values(EXPR, p, '2018-12-31:2015-01-01')",
    "al.load(SAMPLE.parent)",
    "al.load(Path(al.__file__))",
    "al.load(pl.DataFrame())",
    "al.load(pl.DataFrame({'date': [1]}))",
    "al.load(pl.read_parquet(SAMPLE).drop('symbol'))",
    "al.load(pl.read_parquet(SAMPLE).with_columns(pl.col('close').cast(pl.Utf8)))",
    "al.load(pl.read_parquet(SAMPLE).head(9).with_columns(pl.lit([1.0]).alias('close')))",
    "al.load(pl.read_parquet(SAMPLE).head(9).with_columns(pl.lit(b'x').alias('volume')))",
    "al.load(pl.read_parquet(SAMPLE).head(9).with_columns(pl.lit('\\x00').alias('symbol')))",
    "al.load(pl.read_parquet(SAMPLE).to_dicts())",
    "al.KB(SAMPLE)",
    "al.KB('qdrant://127.0.0.1:1/none')",
    "al.train([], p)",
    "al.train(['rank(close)'], p, eta='fast')",
    "al.Model.load(SAMPLE)",
]


def test_the_interpreter_survives_bad_input():
    """Each bad input in a fresh interpreter: a Python exception or a result, never a crash
    (a Rust panic or an abort kills the process)."""
    for code in BAD_INPUTS:
        script = (
            "import alphaloop as al\nimport polars as pl\nfrom pathlib import Path\n"
            f"SAMPLE = Path({str(SAMPLE)!r})\nEXPR = {EXPR!r}\np = al.load(SAMPLE)\n"
            f"try:\n    {code}\n    print('ok')\nexcept Exception as e:\n    print('raised', type(e).__name__)\n"
            "print(al.evaluate(EXPR, p)['n_days'] > 0)\n"
        )
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO.parent)
        assert out.returncode == 0, (code, out.stdout, out.stderr[-2000:])
        lines = out.stdout.split()
        assert lines[-1] == "True", (code, out.stdout)
        assert "PanicException" not in out.stdout, (code, out.stdout)


@pytest.fixture(scope="module")
def kb_dir(tmp_path_factory):
    """A KB of the alpha101 seeds scored on the sample, made by the CLI."""
    d = tmp_path_factory.mktemp("kb") / "store"
    out = run_cli("kb", "--kb", str(d), "import", str(REPO / "alpha_kb" / "seeds" / "alpha101.toml"), "--data", str(SAMPLE), cwd=d.parent)
    assert out.returncode == 0, out.stderr
    return d


def cli_json(*args: str, cwd: Path):
    out = run_cli(*args, "--json", cwd=cwd)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_kb_reads_what_the_cli_reads(kb_dir, tmp_path):
    with al.KB(kb_dir) as kb:
        stats = kb.stats()
        records = kb.to_polars()
        top = kb.top(n=5)
        hits = kb.search("short-term reversal of volume-weighted price", 5)
        first = kb.get(top["id"][0])
        similar = kb.similar(top["id"][0], 3)
        assert kb.get("no-such-id") is None
    # Closed: the CLI can open it now.
    assert stats == cli_json("kb", "--kb", str(kb_dir), "stats", cwd=tmp_path)
    assert records.height == stats["total"] and records["id"].n_unique() == records.height
    want_top = cli_json("kb", "--kb", str(kb_dir), "top", "-n", "5", cwd=tmp_path)
    assert top["id"].to_list() == [r["id"] for r in want_top]
    assert same(top["valid_rank_ic"].to_list(), [r["metrics"]["valid"]["rank_ic"] for r in want_top])
    want_hits = cli_json("kb", "--kb", str(kb_dir), "search", "short-term reversal of volume-weighted price", "-n", "5", cwd=tmp_path)
    assert hits["id"].to_list() == [h["record"]["id"] for h in want_hits]
    assert same(hits["score"].to_list(), [h["score"] for h in want_hits])
    assert first == cli_json("kb", "--kb", str(kb_dir), "show", top["id"][0], cwd=tmp_path)
    assert similar.height == 3 and top["id"][0] not in similar["id"].to_list()


def test_a_kb_in_use_gives_the_clis_error(kb_dir, tmp_path):
    kb = al.KB(kb_dir)
    try:
        out = run_cli("kb", "--kb", str(kb_dir), "stats", cwd=tmp_path)
        assert out.returncode == 2 and "is in use by another alphaloop process" in out.stderr
        with pytest.raises(al.KbError, match="is in use by another alphaloop process"):
            al.KB(kb_dir)
    finally:
        kb.close()
    with pytest.raises(al.KbError, match="is closed"):
        kb.stats()
    with pytest.raises(al.KbError, match="no knowledge base at"):
        al.KB(tmp_path / "nothing-here")
    with pytest.raises(al.KbError, match="is a file, not a knowledge base"):
        al.KB(SAMPLE)
    with pytest.raises(ValueError, match="unknown status"):
        with al.KB(kb_dir) as k:
            k.top(status="good")


def test_train_and_predict_as_the_cli_does(panel, tmp_path):
    alphas = {"rev5": "rank(delta(close, 5)) * -1", "vol": "rank(volume / adv20)", "a101": "alpha:alpha101_101"}
    report, model = al.train(alphas, panel, max_rounds=30)
    assert set(report) >= {"train", "valid", "test", "features", "trees", "importance", "baselines"}
    assert [f["id"] for f in report["features"]] == list(alphas) and model.features == alphas
    assert model.label == {"horizon": 1, "gap": 1} and report["trees"] >= 1
    # The same model through the CLI: an alpha file and `train --seeds FILE --no-seed-baseline`.
    f = tmp_path / "a.toml"
    f.write_text("".join(f'[[alpha]]\nid = "{k}"\nformula = "{v}"\n\n' for k, v in alphas.items()))
    cli_report = cli_json("train", "--data", str(SAMPLE), "--seeds", str(f), "--no-seed-baseline", "--max-rounds", "30", "--out", str(tmp_path / "m.json"), cwd=tmp_path)
    for split in ("train", "valid", "test"):
        assert same(report[split], cli_report[split]), split
    # Saved, loaded, and scoring the same as `alphaloop predict`.
    model.save(tmp_path / "py.json")
    again = al.Model.load(tmp_path / "py.json")
    scores = again.predict(panel, "2018-06-29")
    assert scores.columns == ["date", "symbol", "score"] and 50 <= scores.height <= 60
    assert scores["score"].to_list() == sorted(scores["score"].to_list(), reverse=True)
    want = cli_json("predict", "--model", str(tmp_path / "py.json"), "--data", str(SAMPLE), "--date", "2018-06-29", cwd=tmp_path)
    assert [r["symbol"] for r in want] == scores["symbol"].to_list()
    assert same([r["score"] for r in want], scores["score"].to_list())
    assert same(model.predict(panel)["score"].to_list(), again.predict(panel)["score"].to_list())
    with pytest.raises(ValueError, match="unknown training setting 'rounds'"):
        al.train(alphas, panel, rounds=3)
    with pytest.raises(al.ExpressionError, match="in bad: unknown field"):
        al.train({"bad": "rank(clsoe)"}, panel)
    with pytest.raises(al.DataError, match="2018-06-30 is not a trading date of .*: the nearest are 2018-06-29 and 2018-07-02"):
        model.predict(panel, "2018-06-30")
    with pytest.raises(al.AlphaloopError, match="not an alphaloop model"):
        f.write_text("{}")
        al.Model.load(f)


def test_a_polars_or_pandas_frame_loads_as_the_file_does(panel):
    frame = pl.read_parquet(SAMPLE)
    from_polars = al.load(frame)
    assert from_polars.symbols == panel.symbols and len(from_polars) == len(panel)
    assert same(al.evaluate(EXPR, from_polars), al.evaluate(EXPR, panel))
    pd = pytest.importorskip("pandas")
    pdf = pd.read_parquet(SAMPLE) if _has_pyarrow() else pd.DataFrame({c: frame[c].to_numpy() for c in frame.columns})
    pdf["date"] = pd.to_datetime(pdf["date"])
    from_pandas = al.load(pdf.set_index(["date", "symbol"]))
    assert same(al.evaluate(EXPR, from_pandas, "test"), al.evaluate(EXPR, panel, "test"))
    lazy = al.load(frame.lazy().with_columns(pl.col("date").cast(pl.Utf8)))
    assert same(al.values(EXPR, lazy, "test")["value"].to_list(), al.values(EXPR, panel, "test")["value"].to_list())


def _has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def test_a_bad_frame_gets_the_files_error(panel):
    frame = pl.read_parquet(SAMPLE).head(500)
    with pytest.raises(al.DataError, match=r"DataFrame: missing column 'close'"):
        al.load(frame.drop("close"))
    bad = frame.with_columns(pl.col("close").cast(pl.Utf8)).with_columns(pl.when(pl.int_range(pl.len()) == 41).then(pl.lit("n/a")).otherwise(pl.col("close")).alias("close"))
    with pytest.raises(al.DataError, match=r"DataFrame: column 'close', row 42: 'n/a' is not a number"):
        al.load(bad)
    with pytest.raises(al.DataError, match=r"DataFrame: duplicate row"):
        al.load(pl.concat([frame, frame.head(1)]))
    with pytest.raises(al.DataError, match="no rows"):
        al.load(frame.head(0))
    with pytest.raises(al.DataError, match=r"column 'volume', row 3: -5"):
        al.load(frame.with_columns(pl.when(pl.int_range(pl.len()) == 2).then(-5.0).otherwise(pl.col("volume")).alias("volume")))
    with pytest.raises(al.DataError, match=r"column 'symbol', row 7: missing value"):
        al.load(frame.with_columns(pl.when(pl.int_range(pl.len()) == 6).then(None).otherwise(pl.col("symbol")).alias("symbol")))
    with pytest.raises(al.DataError, match=r"column 'date', row 1"):
        al.load(frame.with_columns(pl.lit(1.5).alias("date")))
    with pytest.raises(TypeError, match="pandas or polars DataFrame"):
        al.load(42)
    with pytest.raises(al.DataError, match=r"DataFrame: column 'close' has type List"):
        al.load(frame.with_columns(pl.lit([1.0]).alias("close")))


def test_the_quickstart_runs_as_a_script(kb_dir, tmp_path):
    env = dict(os.environ, ALPHALOOP_DATA=str(SAMPLE), ALPHALOOP_KB=str(kb_dir), MPLBACKEND="Agg")
    out = subprocess.run([sys.executable, str(REPO / "examples" / "quickstart.py")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    for want in ["reversal_5d", "long-short book, valid", "valid_rank_ic", "test   Rank IC"]:
        assert want in out.stdout, (want, out.stdout[-3000:])
    assert (tmp_path / "quickstart-model.json").is_file()
