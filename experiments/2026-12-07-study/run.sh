#!/usr/bin/env bash
# The recorded study: experiments/2026-12-07-study/study.toml, 5 arms × 3 seeds × 0.5 h,
# with each run's self-improvement curve, the combined models on test (--final), and the
# idea-relevance leaderboard across the arms (10 pairs for every two arms, both orders).
# Resumable: run it again and the study continues where it stopped. Work files go to
# ~/.cache/alphaloop/experiments/2026-12-07-study; summary.json and curves.png beside this
# script.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
. scripts/env.sh
work="$ALPHALOOP_CACHE/experiments/2026-12-07-study"
mkdir -p "$work/bin"
export ALPHALOOP_DATA="$(realpath ../shared/data/sp500_daily.parquet)"
# The code of the whole study: a worktree of the commit it was first run from, built once.
[ -f "$work/commit" ] || git rev-parse HEAD > "$work/commit"
if [ ! -x "$work/bin/alphaloop" ]; then
    git worktree prune
    [ -d "$work/src" ] || git worktree add -f --detach "$work/src" "$(cat "$work/commit")" >/dev/null
    (cd "$work/src" && cargo build --release -q --bin alphaloop)
    cp "$CARGO_TARGET_DIR/release/alphaloop" "$work/bin/alphaloop"
    touch src/main.rs
fi
cd "$work/src"
"$work/bin/alphaloop" study "$here/study.toml" --dir "$work/study" --curve --final --leaderboard --pairs 10 --json > "$work/summary.json"
cp "$work/summary.json" "$here/summary.json"
cp "$work/study/curves.png" "$here/curves.png"
cp "$work/study/leaderboard/heatmap.png" "$here/leaderboard.png"
cp "$work/study/leaderboard/pairs.jsonl" "$here/leaderboard-pairs.jsonl"
