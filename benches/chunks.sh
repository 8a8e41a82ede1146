#!/usr/bin/env bash
# How much faster would the alpha101 batch be if every pass ran from cache? Cuts the
# shipped data by date into K equal parts (each small enough for its panels to stay in
# cache), runs the batch (one thread, full metrics) on the whole and on every part, and
# prints the operators' and the metrics' time for the whole against the parts' sum, also
# per cell (the parts drop stocks absent from them). Figures: benches/README.md, "Where the time is".
#
#   benches/chunks.sh [K] [ROUNDS]      # defaults: 4 parts, 2 rounds
#
# Needs python3 with polars (scripts/setup installs it). Each part gets the constituents
# CSV beside it so that every `indneutralize` alpha compiles; the script checks that each
# run evaluated as many alphas as the whole did.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
K="${1:-4}" ROUNDS="${2:-2}"
DATA=../shared/data/sp500_daily.parquet
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
cargo build -q --release --bin alphaloop
BIN="$CARGO_TARGET_DIR/release/alphaloop"
cp ../shared/data/sp500_constituents.csv "$OUT/"
python3 - "$DATA" "$OUT" "$K" <<'EOF'
import sys, polars as pl
data, out, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
d = pl.read_parquet(data)
dates = d["date"].unique().sort()
n = len(dates)
for i in range(k):
    lo, hi = dates[i * n // k], dates[(i + 1) * n // k - 1]
    d.filter((pl.col("date") >= lo) & (pl.col("date") <= hi)).write_parquet(f"{out}/part{i}.parquet")
EOF
run() { # data file, log file
    RAYON_NUM_THREADS=1 "$BIN" --log debug eval --data "$1" --period all --json \
        --file alpha_kb/seeds/alpha101.toml >"$2.json" 2>"$2"
    "$BIN" data info "$1" >"$2.info" 2>/dev/null
}
for r in $(seq "$ROUNDS"); do
    run "$DATA" "$OUT/whole.$r"
    for i in $(seq 0 $((K - 1))); do run "$OUT/part$i.parquet" "$OUT/part$i.$r"; done
done
python3 - "$OUT" "$K" "$ROUNDS" <<'EOF'
import json, re, statistics, sys
out, k, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def secs(t):
    v, u = re.match(r"([0-9.]+)(ms|µs|s)", t).groups()
    return float(v) * {"s": 1, "ms": 1e-3, "µs": 1e-6}[u]
def measure(stem):
    log = re.sub(r"\x1b\[[0-9;]*m", "", open(stem, encoding="utf-8").read())
    ops = sum(secs(t) for _, t in re.findall(r"op (\S+)\s+x\d+\s+(\S+)", log))
    metrics = secs(re.search(r"metrics\): (\S+)", log).group(1))
    ok = sum(1 for row in json.load(open(stem + ".json")) if "error" not in row)
    info = open(stem + ".info").read()
    cells = int(re.search(r"assets\s+(\d+)", info).group(1)) * int(re.search(r"dates\s+(\d+)", info).group(1))
    return ops, metrics, ok, cells
rows = {"whole": [], "parts": []}
for r in range(1, rounds + 1):
    w = measure(f"{out}/whole.{r}")
    parts = [measure(f"{out}/part{i}.{r}") for i in range(k)]
    bad = [i for i, p in enumerate(parts) if p[2] != w[2]]
    if bad:
        sys.exit(f"parts {bad} evaluated fewer alphas than the whole ({w[2]}): not comparable")
    rows["whole"].append(w)
    rows["parts"].append(tuple(sum(p[j] for p in parts) for j in range(4)))
med = lambda name, j: statistics.median(x[j] for x in rows[name])
share = med("parts", 3) / med("whole", 3)
print(f"{w[2]} alphas, one thread, medians of {rounds} rounds; the {k} parts hold {share:.1%} of the whole's cells")
print(f"{'':<22}{'whole':>9}{'parts':>9}{'ratio':>8}")
print(f"{'operators, as run':<22}{med('whole', 0):>9.3f}{med('parts', 0):>9.3f}{med('parts', 0) / med('whole', 0):>8.3f}")
print(f"{'operators, per cell':<22}{med('whole', 0):>9.3f}{med('parts', 0) / share:>9.3f}{med('parts', 0) / share / med('whole', 0):>8.3f}")
print(f"{'metrics':<22}{med('whole', 1):>9.3f}{med('parts', 1):>9.3f}{med('parts', 1) / med('whole', 1):>8.3f}")
EOF
