#!/usr/bin/env bash
# Interleaved A/B timing of the alpha101 batch (100 alphas, full metrics, one thread)
# between two builds, because this VM's speed drifts by 20 % or more over tens of minutes:
# a "before" figure measured half an hour earlier is not a baseline. Each round runs both back to back (A first in odd
# rounds, B first in even ones), and the per-operator times (`--log debug`) are kept, so a
# kernel change is judged where it runs.
# Prints the median and the minimum of each side.
# Read the operators whose code the change did not touch as a control: the binary's layout
# alone moves some of them (`ts_corr` by ±30 % between builds whose correlation code is
# byte-identical), and the total moves with them.
#
#   benches/ab.sh [REV_A [REV_B [ROUNDS]]]     # defaults: HEAD, the working tree, 5
#   AB_TOL=1e-12 benches/ab.sh ...             # also compare differing outputs numerically
#   AB_ROWS=40 benches/ab.sh ...               # more operators in the table (default 14)
#   AB_CPU=1 benches/ab.sh ...                 # pin every run to that core (taskset)
#
# Pinning helps on a VM whose cores differ in speed (one Intel Xeon VM had a core 40 % slower
# than the other): unpinned, a run lands on either, and the spread swamps a 2 % change.
#
# REV_A / REV_B: a git revision, or "." for the working tree. Revisions are checked out
# into temporary worktrees and built with the shared CARGO_TARGET_DIR (only this crate
# recompiles, about a minute each). Prints each run and the medians.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
A="${1:-HEAD}" B="${2:-.}" ROUNDS="${3:-5}"
OUT="$(mktemp -d)"
trap 'git worktree prune >/dev/null 2>&1 || true' EXIT

build() { # rev name -> $OUT/name
    local rev="$1" name="$2" dir
    if [ "$rev" = "." ]; then
        dir="$PWD"
    else
        dir="$OUT/src-$name"
        git worktree add -q --detach "$dir" "$rev"
    fi
    # Both builds share one crate unit in the target dir, and cargo judges freshness by
    # mtimes: a working tree edited before the other revision's build would look fresh
    # and B would silently be a copy of A. Touching the crate root forces the rebuild.
    (cd "$dir" && touch src/lib.rs && cargo build -q --release --bin alphaloop)
    cp "$CARGO_TARGET_DIR/release/alphaloop" "$OUT/$name"
    [ "$rev" = "." ] || git worktree remove --force "$dir"
}
build "$A" a
build "$B" b

SEEDS=alpha_kb/seeds/alpha101.toml
# The order alternates (A B, then B A): run always second, one side paid for the order,
# 5-13 % on every operator in one measured hour.
for r in $(seq "$ROUNDS"); do
    order="a b"
    [ $((r % 2)) -eq 1 ] || order="b a"
    for v in $order; do
        RAYON_NUM_THREADS=1 /usr/bin/time -f "wall %e" ${AB_CPU:+taskset -c "$AB_CPU"} "$OUT/$v" --log debug eval --period all --json --file "$SEEDS" \
            2>"$OUT/$v.$r.log" >"$OUT/$v.$r.json"
        echo "round $r $v: $(grep -oE 'wall [0-9.]+' "$OUT/$v.$r.log") s, metrics $(grep -oE 'metrics\): [0-9.]+m?s' "$OUT/$v.$r.log" | cut -d' ' -f2)"
    done
done
if cmp -s "$OUT/a.1.json" "$OUT/b.1.json"; then
    echo "outputs: identical"
else
    # A change that reorders float operations moves last bits only: AB_TOL=1e-12 accepts
    # that (benches/compare_json.py, relative); anything more is a bug.
    echo "outputs: DIFFER (compare $OUT/a.1.json $OUT/b.1.json)"
    [ -z "${AB_TOL:-}" ] || python3 benches/compare_json.py "$OUT/a.1.json" "$OUT/b.1.json" "$AB_TOL" || true
fi

python3 - "$OUT" "$ROUNDS" "${AB_ROWS:-14}" <<'EOF'
import re, statistics, sys
out, rounds, shown = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def secs(s):
    v, u = re.match(r"([0-9.]+)(ms|µs|s)", s).groups()
    return float(v) * {"s": 1, "ms": 1e-3, "µs": 1e-6}[u]
rows = {}
for v in "ab":
    for r in range(1, rounds + 1):
        log = open(f"{out}/{v}.{r}.log", encoding="utf-8").read()
        log = re.sub(r"\x1b\[[0-9;]*m", "", log)
        rows.setdefault(("total", v), []).append(float(re.search(r"wall ([0-9.]+)", log).group(1)))
        rows.setdefault(("metrics", v), []).append(secs(re.search(r"metrics\): (\S+)", log).group(1)))
        for name, t in re.findall(r"op (\S+)\s+x\d+\s+(\S+)", log):
            rows.setdefault((name, v), []).append(secs(t))
names = sorted({k for k, _ in rows}, key=lambda k: -statistics.median(rows.get((k, "a"), [0])))
# The minimum beside the median: a neighbour's load only ever slows a run down, so on a
# noisy hour the fastest runs of each side are the fairer comparison.
print(f"{'over ' + str(rounds) + ' rounds':<22}{'A med':>9}{'B med':>9}{'B/A':>8}{'A min':>9}{'B min':>9}{'B/A':>8}")
for k in names[:shown]:
    ra, rb = rows.get((k, "a"), [0]), rows.get((k, "b"), [0])
    a, b = statistics.median(ra), statistics.median(rb)
    ma, mb = min(ra), min(rb)
    print(f"{k:<22}{a:>9.3f}{b:>9.3f}{(b / a if a else float('nan')):>8.3f}{ma:>9.3f}{mb:>9.3f}{(mb / ma if ma else float('nan')):>8.3f}")
EOF
