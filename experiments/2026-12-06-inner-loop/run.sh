#!/usr/bin/env bash
# The inner loop before and after it became a search the LLM steers: `mine --ideas 50` on
# the full shipped data from a KB of the 101 seeds, the same local model in both.
#
#   before        the loop before the refiner, the judge's memory and the writer's labels
#                 (commit 22b9eb6), Qwen2.5-Coder 0.5B
#   after-small   the commit this was first run from, Qwen2.5-Coder 0.5B (--model small):
#                 the loop's change alone
#
# (The 1.5B model's figures come from the overnight experiment, which mines with it; what
# the knowledge base brings is a study's arm, with seeds.)
#
# A run with the local model is deterministic (each request's seed follows from the idea's
# number and round), so arms differ by what they change and nothing else; one run per arm.
# Each run uses one llama.cpp thread beside the other, so seconds per idea compare. Resumable: run it again and each arm
# continues (--resume); a finished arm is skipped. Writes ARM.json (the run summaries)
# and ARM.replies.jsonl (the recorded replies, for `mine --replay`); summarise.py reads them.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
cd "$root"
. scripts/env.sh
work="$ALPHALOOP_CACHE/experiments/2026-12-06-inner-loop"
mkdir -p "$work/bin"

# Each arm's code is a worktree of its commit (templates are read at run time, so the
# working copy's later edits must not reach a resumed arm), built in the shared target
# directory and copied out of it so later builds leave the binary be. The commit of
# "after" is the one this script was first run from.
[ -f "$work/after.commit" ] || git rev-parse HEAD > "$work/after.commit"
build() { # name commit
    [ -x "$work/bin/$1" ] && return 0
    rm -rf "$work/src-$1"
    git worktree prune
    git worktree add -f --detach "$work/src-$1" "$2" >/dev/null
    (cd "$work/src-$1" && cargo build --release -q --bin alphaloop)
    cp "$CARGO_TARGET_DIR/release/alphaloop" "$work/bin/$1"
}
build before 22b9eb6
build after "$(cat "$work/after.commit")"
touch src/main.rs
export ALPHALOOP_DATA="$(realpath ../shared/data/sp500_daily.parquet)"
if [ ! -d "$work/seeds" ]; then
    "$work/bin/after" kb --kb "$work/seeds.part" import alpha_kb/seeds/alpha101.toml >/dev/null
    mv "$work/seeds.part" "$work/seeds"
fi

arm() { # name binary source-dir [mine args...]
    local name="$1" bin="$2" src="$3"; shift 3
    local runs="$work/runs" kb="$work/kb-$name"
    if [ -f "$here/$name.json" ]; then return 0; fi
    # The 50 ideas are given at the start only: a resumed run goes on to its own 50 (given
    # again, they would be 50 more).
    local resume=(--run-id "$name" --ideas 50)
    if [ -d "$runs/$name" ]; then resume=(--resume "$name"); else rm -rf "$kb"; cp -r "$work/seeds" "$kb"; fi
    (cd "$src" && ALPHALOOP_RUNS="$runs" "$bin" mine --kb "$kb" --llm-threads 1 --json "${resume[@]}" "$@" > "$work/$name.json.part")
    mv "$work/$name.json.part" "$here/$name.json"
    cp "$runs/$name/replies.jsonl" "$here/$name.replies.jsonl"
    cp "$runs/$name/log.jsonl" "$here/$name.log.jsonl"
}

arm before "$work/bin/before" "$work/src-before" --model "$ALPHALOOP_CACHE/models/qwen2.5-coder-0.5b-instruct.gguf" &
arm after-small "$work/bin/after" "$work/src-after" --model small &
wait
python3 "$here/summarise.py" "$here" | tee "$here/results.md"
