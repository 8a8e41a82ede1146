#!/usr/bin/env bash
# alphaloop beside KunQuant and py-alpha-lib, timed in the same minutes on this machine:
# the 100 evaluable alpha101 seeds on one thread, compute only (the measure both peers
# compute: neither scores its alphas) and with every metric, then each installed peer.
#
# Why together: these VMs run the same binary up to 1.6x apart from hour to hour, so a
# ratio between engines only means something when both ran in the same minutes. Prints
# each peer's fastest run, alphaloop's two criterion estimates and the speed ratios
# (benches/README.md, "Beside the peers").
#
#   benches/target.sh            # about 6 minutes
#   benches/target.sh --no-bench # the last criterion estimates instead of new runs
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh

# Which kind of machine: the readings differ by kind (benches/README.md names them).
awk -F': ' '/^model name/ {n = $2} /^cpu family/ {f = $2} /^model\t/ {m = $2} END {printf "machine: %s, family %s model %s\n", n, f, m}' /proc/cpuinfo 2>/dev/null || true

if [[ "${1:-}" != "--no-bench" ]]; then
    cargo bench --bench engine -- 'alpha101_(full_metrics|compute_only)_1_thread' >&2
fi
estimate() { # benchmark name -> criterion's mean, in seconds
    local est="$CARGO_TARGET_DIR/criterion/engine/$1/new/estimates.json"
    [[ -f "$est" ]] || { echo "no criterion estimate at $est: run without --no-bench" >&2; exit 1; }
    python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['mean']['point_estimate'] / 1e9)" "$est"
}
ours=$(estimate alpha101_full_metrics_1_thread)
compute=$(estimate alpha101_compute_only_1_thread)
printf 'alphaloop: %.2f s with every metric, %.2f s compute only (criterion estimates, alpha101_*_1_thread)\n' "$ours" "$compute"

# The peer's fastest run here and alphaloop's two times: how many times faster alphaloop
# computes the same set, and the time it needs for every metric on top.
report() {
    python3 -c "
import sys
name, n, here, ours, compute = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:6])
print(f'{name}: {n} alphas in {here:.2f} s; alphaloop computes its 100 {here / compute:.1f}x faster ({compute:.2f} s), {ours:.2f} s with every metric')
" "$@"
}

if python3 -c "import KunQuant" 2>/dev/null; then
    out=$(python3 benches/peer/kunquant.py)
    echo "$out" >&2
    kq=$(sed -n 's/^KunQuant run [0-9]*: [0-9]* alphas in \([0-9.]*\) s.*/\1/p' <<<"$out" | sort -n | head -1)
    report KunQuant 82 "$kq" "$ours" "$compute"
else
    echo "KunQuant: not installed (python3 -m pip install KunQuant pandas pyarrow)"
fi

py312="${PY312:-$HOME/.pyenv/versions/3.12.1/bin/python}"
if [[ -x "$py312" ]] && "$py312" -c "import alpha" 2>/dev/null; then
    out=$(RAYON_NUM_THREADS=1 "$py312" benches/peer/py_alpha_lib.py)
    echo "$out" >&2
    pal=$(sed -n 's/^py-alpha-lib: [0-9]* alphas in \([0-9.]*\) s.*/\1/p' <<<"$out")
    report py-alpha-lib 100 "$pal" "$ours" "$compute"
else
    echo "py-alpha-lib: not installed (Python >= 3.11 at \$PY312: -m pip install py-alpha-lib pandas pyarrow)"
fi
