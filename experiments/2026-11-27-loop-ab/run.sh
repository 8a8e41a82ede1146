#!/usr/bin/env bash
# The inner loop before and after two changes (stop on a high score only for a
# candidate that can be accepted; ask again when the writer copies a known alpha), 12 ideas
# each with the local model on the full data, each arm from its own KB holding the 101
# seeds. BEFORE is a build of the commit before the changes (2130e7b), AFTER of one after.
#
#   experiments/2026-11-27-loop-ab/run.sh BEFORE_BINARY AFTER_BINARY
set -euo pipefail
cd "$(dirname "$0")/../.."
EXP="${EXP_DIR:-${ALPHALOOP_CACHE:-$HOME/.cache/alphaloop}/experiments/loop-ab}"
export ALPHALOOP_RUNS="$EXP/runs"
mkdir -p "$ALPHALOOP_RUNS"
for arm in before after; do
    B=$([ $arm = before ] && echo "$1" || echo "$2")
    printf 'kb = "%s/kb-%s"\n' "$EXP" "$arm" > "$EXP/$arm.toml"
    "$B" --config "$EXP/$arm.toml" kb import alpha_kb/seeds/alpha101.toml
    "$B" --config "$EXP/$arm.toml" mine --ideas 12 --run-id "$arm" --json > "$EXP/$arm.json"
    cp "$ALPHALOOP_RUNS/$arm/log.jsonl" "experiments/2026-11-27-loop-ab/logs/$arm.log.jsonl"
done
