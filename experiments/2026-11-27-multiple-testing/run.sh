#!/usr/bin/env bash
# The 100 evaluable seed alphas in a fresh KB, then `kb holdout` on the full shipped data:
# writes holdout.txt and, through summarize.py, summary.txt. About 30 s once built.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
. scripts/env.sh
B="$CARGO_TARGET_DIR/release/alphaloop"
kb="$(mktemp -d)/kb"
trap 'rm -rf "$(dirname "$kb")"' EXIT
"$B" kb --kb "$kb" import alpha_kb/seeds/alpha101.toml >/dev/null
"$B" kb --kb "$kb" holdout > "$here/holdout.txt"
"$B" kb --kb "$kb" --json holdout | python3 "$here/summarize.py" > "$here/summary.txt"
cat "$here/summary.txt"
