#!/usr/bin/env bash
# The overnight experiment: does a night of mining give a set of alphas that predicts
# better out of sample than the published alphas it starts from?
#
# Arms, each `mine --hours 8` on the full shipped data from its own copy of a KB holding
# the 101 seeds, both at once on one core each (one llama.cpp thread, one evaluation
# thread), every [mine] setting at its default:
#   llm  the loop with the local Qwen2.5-Coder 1.5B (mining's default model)
#   gp   --writer gp, the same wall time
# Then, for each arm at horizons 1 and 5: `train` over the arm's accepted mined alphas
# beside the alpha101 seeds through the same model (its default baseline), and Qlib's
# Alpha158 through the same model; the signed-mean combination of each set on test
# (`eval --period test`, nothing fitted); the arm's accepted alphas exported as a
# self-contained alpha file; `runs show --json` for the protocol and the growth.
# summarise.py writes results.md from these.
#
# Resumable: run it again and an arm continues with --resume, its 8 hours counted across
# restarts (the hours are given only at the start: a resumed run keeps its own, less what
# it has spent); a step whose output exists is skipped. Work files go to
# ~/.cache/alphaloop/experiments/2026-12-07-overnight, results beside this script.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
cd "$root"
. scripts/env.sh
work="$ALPHALOOP_CACHE/experiments/2026-12-07-overnight"
export ALPHALOOP_DATA="$(realpath ../shared/data/sp500_daily.parquet)" ALPHALOOP_RUNS="$work/runs"

# The code of the whole experiment: the commit it was first run from (scripts/pinned-build).
scripts/pinned-build "$work"
A="$work/bin/alphaloop"
cd "$work/src"
if [ ! -d "$work/seeds" ]; then
    "$A" kb --kb "$work/seeds.part" import alpha_kb/seeds/alpha101.toml >/dev/null
    mv "$work/seeds.part" "$work/seeds"
fi
if [ ! -d "$work/alpha158" ]; then
    "$A" kb --kb "$work/alpha158.part" import alpha_kb/seeds/alpha158.toml >/dev/null
    mv "$work/alpha158.part" "$work/alpha158"
fi

mine() { # arm [mine args...]
    local arm="$1"; shift
    [ -f "$here/run-$arm.json" ] && return 0
    local go=(--run-id "$arm" --hours 8)
    if [ -d "$work/runs/$arm" ]; then go=(--resume "$arm"); else rm -rf "$work/kb-$arm"; cp -r "$work/seeds" "$work/kb-$arm"; fi
    RAYON_NUM_THREADS=1 "$A" mine --kb "$work/kb-$arm" --json "${go[@]}" "$@" > "$work/mine-$arm.json"
    "$A" runs show "$arm" --json > "$here/run-$arm.json"
}
mine llm --llm-threads 1 &
mine gp --writer gp &
wait
[ -f "$here/run-llm.json" ] && [ -f "$here/run-gp.json" ]

# The signed-mean combination of records on test: each record's per-date rank with the
# sign of its train Rank IC, averaged (`eval` resolves alpha:ID from the KB).
combination() { # kb ids-file horizon out
    [ -f "$4" ] && return 0
    # A set with no alphas has no combination.
    grep -q . "$2" || return 0
    local expr
    expr="$("$A" kb --kb "$1" --json export | python3 -c '
import json, sys
ids = set(open(sys.argv[1]).read().split())
recs = [r for r in json.load(sys.stdin) if r["id"] in ids and r["kind"] == "expression"]
terms = []
for r in recs:
    ric = (r.get("metrics", {}).get("train") or {}).get("rank_ic")
    if ric:
        terms.append(("+" if ric > 0 else "-") + " rank(alpha:" + r["id"] + ")")
print("(" + " ".join(terms).lstrip("+ ") + ") / " + str(len(terms)))
' "$2")"
    "$A" eval --kb "$1" --horizon "$3" --period train,valid,test --json "$expr" > "$4.part"
    mv "$4.part" "$4"
}

for arm in llm gp; do
    kb="$work/kb-$arm"
    # The arm's accepted mined alphas as a self-contained alpha file (any record their code
    # names as alpha:ID goes with them): what anyone can score on other data, and the
    # features at every horizon (KB records keep the label they were scored at).
    if [ ! -f "$here/accepted-$arm.toml" ]; then
        "$A" kb --kb "$kb" --json export --status all | python3 -c '
import json, re, sys
recs = {r["id"]: r for r in json.load(sys.stdin)}
keep = [i for i, r in recs.items() if r.get("run_id") and r["status"]["state"] == "accepted" and r["kind"] == "expression"]
i = 0
while i < len(keep):
    for ref in re.findall(r"alpha:([A-Za-z0-9_.-]+)", recs[keep[i]]["code"]):
        if ref in recs and ref not in keep:
            keep.append(ref)
    i += 1
print("# The accepted alphas the arm mined, with the records their code names as alpha:ID.")
for i in keep:
    r = recs[i]
    code, family = json.dumps(r["code"]), json.dumps(r.get("family", ""))
    print()
    print("[[alpha]]")
    print("id = " + json.dumps(i))
    print("formula = " + code)
    print("family = " + family)
' > "$work/accepted-$arm.part"
        mv "$work/accepted-$arm.part" "$here/accepted-$arm.toml"
    fi
    "$A" kb --kb "$kb" --json export --status accepted | python3 -c 'import json,sys; print("\n".join(r["id"] for r in json.load(sys.stdin) if r.get("run_id")))' > "$work/mined-$arm.ids"
    "$A" kb --kb "$kb" --json export --status accepted | python3 -c 'import json,sys; print("\n".join(r["id"] for r in json.load(sys.stdin)))' > "$work/all-$arm.ids"
    for h in 1 5; do
        # (An arm that accepted nothing has no model to train.) The alpha101 seeds through
        # the same model are its baseline.
        if grep -q . "$work/mined-$arm.ids" && [ ! -f "$here/train-$arm-h$h.json" ]; then
            "$A" train --seeds "$here/accepted-$arm.toml" --baseline alpha_kb/seeds/alpha101.toml --horizon "$h" --out "$work/model-$arm-h$h.json" --json > "$work/train-$arm-h$h.part"
            mv "$work/train-$arm-h$h.part" "$here/train-$arm-h$h.json"
        fi
        [ "$h" = 1 ] && combination "$kb" "$work/mined-$arm.ids" "$h" "$here/combination-mined-$arm-h$h.json"
        [ "$h" = 1 ] && combination "$kb" "$work/all-$arm.ids" "$h" "$here/combination-all-$arm-h$h.json"
    done
done
"$A" kb --kb "$work/seeds" --json export | python3 -c 'import json,sys; print("\n".join(r["id"] for r in json.load(sys.stdin)))' > "$work/seeds.ids"
"$A" kb --kb "$work/alpha158" --json export | python3 -c 'import json,sys; print("\n".join(r["id"] for r in json.load(sys.stdin)))' > "$work/alpha158.ids"
for h in 1 5; do
    if [ ! -f "$here/train-seeds-h$h.json" ]; then
        "$A" train --seeds --no-seed-baseline --horizon "$h" --out "$work/model-seeds-h$h.json" --json > "$work/train-seeds-h$h.part"
        mv "$work/train-seeds-h$h.part" "$here/train-seeds-h$h.json"
    fi
    if [ ! -f "$here/train-alpha158-h$h.json" ]; then
        "$A" train --seeds alpha_kb/seeds/alpha158.toml --no-seed-baseline --horizon "$h" --out "$work/model-alpha158-h$h.json" --json > "$work/train-alpha158-h$h.part"
        mv "$work/train-alpha158-h$h.part" "$here/train-alpha158-h$h.json"
    fi
done
python3 "$here/summarise.py" "$here" > "$here/results.md"
