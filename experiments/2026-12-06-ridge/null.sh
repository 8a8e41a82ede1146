#!/usr/bin/env bash
# The ridge combiner's noise rate: the null model of ../2026-12-06-gain-noise (within-date
# shuffles of the same five mined alphas, judged against a KB of the seeds on the full
# shipped data) with `combiner = "ridge"` at the default penalty. Writes null-N.json per
# alpha and null-summary.txt. Resumable: an alpha whose null-N.json exists is skipped.
# DRAWS (default 200) shuffles per alpha.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
noise="$here/../2026-12-06-gain-noise"
cd "$here/../.."
. scripts/env.sh
cargo build --release -q
B="$CARGO_TARGET_DIR/release/alphaloop"
kb="$ALPHALOOP_CACHE/experiments/gain-noise/kb"
[ -d "$kb" ] || { mkdir -p "$(dirname "$kb")"; "$B" kb --kb "$kb" import alpha_kb/seeds/alpha101.toml >/dev/null; }
cfg="$(mktemp)"
trap 'rm -f "$cfg"' EXIT
printf '[mine]\ncombiner = "ridge"\n' > "$cfg"
n=0
while IFS= read -r expr; do
    n=$((n + 1))
    out="$here/null-$n.json"
    [ -s "$out" ] && continue
    "$B" --config "$cfg" kb --kb "$kb" --json judge --null "${DRAWS:-200}" --seed "$n" "$expr" > "$out.part"
    mv "$out.part" "$out"
done < "$noise/alphas.txt"
python3 "$noise/summarize.py" "$here"/null-*.json > "$here/null-summary.txt"
cat "$here/null-summary.txt"
