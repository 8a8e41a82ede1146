#!/usr/bin/env bash
# The gain rule's null model on the full shipped data: within-date shuffles of five alphas
# accepted by earlier mining runs, judged against a KB of the 100 evaluable seeds with the
# default [mine] settings. Writes null-N.json per alpha and, through summarize.py,
# summary.txt. Resumable: an alpha whose null-N.json exists is skipped. DRAWS (default
# 200) shuffles per alpha.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
. scripts/env.sh
cargo build --release -q
B="$CARGO_TARGET_DIR/release/alphaloop"
kb="$ALPHALOOP_CACHE/experiments/gain-noise/kb"
[ -d "$kb" ] || { mkdir -p "$(dirname "$kb")"; "$B" kb --kb "$kb" import alpha_kb/seeds/alpha101.toml >/dev/null; }
n=0
while IFS= read -r expr; do
    n=$((n + 1))
    out="$here/null-$n.json"
    [ -s "$out" ] && continue
    "$B" kb --kb "$kb" --json judge --null "${DRAWS:-200}" --seed "$n" "$expr" > "$out.part"
    mv "$out.part" "$out"
done < "$here/alphas.txt"
python3 "$here/summarize.py" "$here"/null-*.json > "$here/summary.txt"
cat "$here/summary.txt"
