#!/usr/bin/env bash
# The mining loop with the units check off and on (`[mine] check_units`), 12 ideas each
# with the local model on the full data, each arm from its own KB holding the 101 seeds;
# then check_logs.py over the earlier experiments' logs and these.
#
#   experiments/2026-11-28-units-check/run.sh [ALPHALOOP_BINARY]
set -euo pipefail
cd "$(dirname "$0")/../.."
B="${1:-${CARGO_TARGET_DIR:-$HOME/.cache/alphaloop/target}/release/alphaloop}"
EXP="${EXP_DIR:-${ALPHALOOP_CACHE:-$HOME/.cache/alphaloop}/experiments/units-check}"
export ALPHALOOP_RUNS="$EXP/runs"
rm -rf "$EXP"
mkdir -p "$ALPHALOOP_RUNS" experiments/2026-11-28-units-check/logs
for arm in off on; do
    printf 'kb = "%s/kb-%s"\n[mine]\ncheck_units = %s\n' "$EXP" "$arm" "$([ $arm = on ] && echo true || echo false)" > "$EXP/$arm.toml"
    "$B" --config "$EXP/$arm.toml" kb import alpha_kb/seeds/alpha101.toml > /dev/null
    "$B" --config "$EXP/$arm.toml" mine --ideas 12 --run-id "$arm" --json > "$EXP/$arm.json"
    cp "$ALPHALOOP_RUNS/$arm/log.jsonl" "experiments/2026-11-28-units-check/logs/$arm.log.jsonl"
    cp "$ALPHALOOP_RUNS/$arm/replies.jsonl" "$EXP/$arm.replies.jsonl"
done
experiments/2026-11-28-units-check/check_logs.py "$B"
