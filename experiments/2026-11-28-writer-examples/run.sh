#!/usr/bin/env bash
# The mining loop with the writer's prompt before and after it showed three worked examples of
# turning an idea into an alpha and called the retrieved accepted alphas contrast, not
# material (templates/writer_system.md, templates/writer_user.md). Prompts are read from
# the checkout the binary runs in, so each arm runs one binary from its own checkout:
#
#   experiments/2026-11-28-writer-examples/run.sh BINARY CHECKOUT_BEFORE CHECKOUT_AFTER [CHECKOUT_RESTATED]
#
# (the third arm, optional: the after checkout with restated.patch applied, which restates
# the idea as the prompt's last line). 16 ideas per arm (IDEAS=N to change), the local
# model on the full data, each arm from its own KB holding the 101 seeds; then summarize.py
# over the runs (results.txt; logs/ keeps each run's log and a line per writer reply with
# what it copied).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
BIN="$(realpath "$1")"
EXP="${EXP_DIR:-${ALPHALOOP_CACHE:-$HOME/.cache/alphaloop}/experiments/writer-examples}"
export ALPHALOOP_RUNS="$EXP/runs"
rm -rf "$EXP"
mkdir -p "$ALPHALOOP_RUNS" "$HERE/logs"
arms=(before after restated)
dirs=("$(realpath "$2")" "$(realpath "$3")")
[ $# -ge 4 ] && dirs+=("$(realpath "$4")")
for i in "${!dirs[@]}"; do
    arm=${arms[$i]}
    printf 'kb = "%s/kb-%s"\n' "$EXP" "$arm" > "$EXP/$arm.toml"
    (cd "${dirs[$i]}" && "$BIN" --config "$EXP/$arm.toml" kb import alpha_kb/seeds/alpha101.toml > /dev/null &&
        "$BIN" --config "$EXP/$arm.toml" mine --ideas "${IDEAS:-16}" --run-id "$arm" --json > "$EXP/$arm.json")
    cp "$ALPHALOOP_RUNS/$arm/log.jsonl" "$HERE/logs/$arm.log.jsonl"
done
"$HERE/summarize.py" "$HERE/logs" "$ALPHALOOP_RUNS" > "$HERE/results.txt"
