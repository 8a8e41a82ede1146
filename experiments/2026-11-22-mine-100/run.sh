#!/usr/bin/env bash
# The 100-idea experiment: 100 ideas mined with the local model (Qwen2.5-Coder 0.5B) on the
# full S&P 500 data, then the same evaluation budget with --writer gp (no LLM) and with
# --no-kb (no retrieval). Each arm starts from its own KB holding the 101 seed alphas.
# Re-running resumes each arm where it stopped (runs are resumable); `summarize.py` turns
# the run logs into results.md.
#
#   experiments/2026-11-22-mine-100/run.sh [llm|gp|nokb ...]     (default: all three)
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/env.sh
EXP="${EXP_DIR:-$ALPHALOOP_CACHE/experiments/mine-100}"
B="$CARGO_TARGET_DIR/release/alphaloop"
export ALPHALOOP_RUNS="$EXP/runs"
mkdir -p "$ALPHALOOP_RUNS"
N="${IDEAS:-100}"
for arm in "${@:-llm gp nokb}"; do
    for a in $arm; do
        KB="$EXP/kb-$a"
        if [ ! -d "$KB" ]; then "$B" kb --kb "$KB" import alpha_kb/seeds/alpha101.toml; fi
        case $a in
            llm) flags=() ;;
            gp) flags=(--writer gp) ;;
            nokb) flags=(--no-kb) ;;
        esac
        run="$a$N"
        log="$ALPHALOOP_RUNS/$run/log.jsonl"
        done_n=$( [ -f "$log" ] && wc -l < "$log" || echo 0 )
        left=$(( N - done_n ))
        [ "$left" -gt 0 ] || continue
        if [ "$done_n" -gt 0 ]; then id=(--resume "$run"); else id=(--run-id "$run"); fi
        echo "arm $a: $left ideas to go" >&2
        "$B" mine --kb "$KB" --ideas "$left" "${id[@]}" "${flags[@]}" --json > "$EXP/$run.summary.json"
    done
done
