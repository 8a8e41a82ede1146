#!/usr/bin/env bash
# The recorded study: experiments/2026-12-07-study/study.toml, 5 arms × 3 seeds × 3 minutes,
# with each run's self-improvement curve, the combined models on test (--final), and the
# idea-relevance leaderboard across the arms (5 pairs for every two arms, both orders).
# Resumable: run it again and the study continues where it stopped. Work files go to
# ~/.cache/alphaloop/experiments/2026-12-07-study; summary.json and curves.png beside this
# script.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
. scripts/env.sh
work="$ALPHALOOP_CACHE/experiments/2026-12-07-study"
export ALPHALOOP_DATA="$(realpath ../shared/data/sp500_daily.parquet)"
# The code of the whole experiment: the commit it was first run from (scripts/pinned-build).
scripts/pinned-build "$work"
cd "$work/src"
# Every run on one core of its own (CPU 0; the llama.cpp, evaluation and XGBoost threads
# follow the affinity), so that work on the other core leaves each run's wall-clock budget
# the same.
export RAYON_NUM_THREADS=1
taskset -c 0 "$work/bin/alphaloop" study "$here/study.toml" --dir "$work/study" --curve --final --leaderboard --pairs 5 --json > "$work/summary.json"
cp "$work/summary.json" "$here/summary.json"
cp "$work/study/curves.png" "$here/curves.png"
cp "$work/study/leaderboard/heatmap.png" "$here/leaderboard.png"
cp "$work/study/leaderboard/pairs.jsonl" "$here/leaderboard-pairs.jsonl"
