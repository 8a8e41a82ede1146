#!/usr/bin/env bash
# The mining loop with the writer's expression grammar before and after it stopped offering
# the call forms of infix operators (`and(`, `lt(`, `where(`, `pow(`; src/llm/grammar.rs):
# 12 ideas per arm with the local model on the full data, each arm from its own KB holding
# the 101 seeds. The grammar is compiled in, so each arm is its own binary:
#
#   experiments/2026-11-28-writer-grammar/run.sh BINARY_BEFORE BINARY_AFTER
#
# then summarize.py over both runs' logs and replies (results.txt; logs/ keeps each run's
# log and a line per LLM call: its role, tokens and limit).
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=experiments/2026-11-28-writer-grammar
EXP="${EXP_DIR:-${ALPHALOOP_CACHE:-$HOME/.cache/alphaloop}/experiments/writer-grammar}"
export ALPHALOOP_RUNS="$EXP/runs"
rm -rf "$EXP"
mkdir -p "$ALPHALOOP_RUNS" "$HERE/logs"
arms=(before after)
bins=("$1" "$2")
for i in 0 1; do
    arm=${arms[$i]}
    printf 'kb = "%s/kb-%s"\n' "$EXP" "$arm" > "$EXP/$arm.toml"
    "${bins[$i]}" --config "$EXP/$arm.toml" kb import alpha_kb/seeds/alpha101.toml > /dev/null
    "${bins[$i]}" --config "$EXP/$arm.toml" mine --ideas 12 --run-id "$arm" --json > "$EXP/$arm.json"
    cp "$ALPHALOOP_RUNS/$arm/log.jsonl" "$HERE/logs/$arm.log.jsonl"
done
"$HERE/summarize.py" "$HERE/logs" "$ALPHALOOP_RUNS" > "$HERE/results.txt"
