#!/usr/bin/env bash
# A million runs of every fuzz target (scripts/fuzz), in two lanes, one per core. Resumable:
# each target's corpus grows under ~/.cache/alphaloop/fuzz/corpus and a rerun starts from
# it; a target whose line is already in summary.tsv is not run again.
#
#   nohup experiments/2026-12-07-fuzz/run.sh &           # every target
#   nohup experiments/2026-12-07-fuzz/run.sh parquet &   # one again (its line deleted)
#
# summary.tsv: target, runs, coverage (libFuzzer's cov), features, corpus size, execs a
# second, peak RSS in MB, seconds fuzzing (libFuzzer's own count), wall seconds (with any
# build of the targets), outcome. Full logs: ~/.cache/alphaloop/fuzz/logs.
set -uo pipefail
cd "$(dirname "$0")/../.."
here=experiments/2026-12-07-fuzz
logs="${ALPHALOOP_CACHE:-$HOME/.cache/alphaloop}/fuzz/logs"
mkdir -p "$logs"
runs="${RUNS:-1000000}"
[ -f "$here/summary.tsv" ] || printf 'target\truns\tcov\tft\tcorpus\texecs_per_s\tpeak_rss_mb\tfuzz_s\twall_s\toutcome\n' > "$here/summary.tsv"

one() { # core target
    local core=$1 t=$2 log="$logs/$2.log" start end rc
    grep -q "^$t	" "$here/summary.tsv" && return 0
    start=$(date +%s)
    taskset -c "$core" scripts/fuzz "$t" "$runs" > "$log" 2>&1
    rc=$?
    end=$(date +%s)
    local done_line
    done_line=$(grep -E "^#[0-9]+[[:space:]]+DONE" "$log" | tail -1)
    stat_of() { grep -E "^stat::$1:" "$log" | tail -1 | awk '{print $2}'; }
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$(stat_of number_of_executed_units)" \
        "$(sed -E 's/.*cov: ([0-9]+).*/\1/' <<<"$done_line")" "$(sed -E 's/.*ft: ([0-9]+).*/\1/' <<<"$done_line")" \
        "$(sed -E 's/.*corp: ([0-9]+).*/\1/' <<<"$done_line")" "$(stat_of average_exec_per_sec)" "$(stat_of peak_rss_mb)" \
        "$(grep -oE "^Done [0-9]+ runs in [0-9]+" "$log" | awk '{print $5}')" "$((end - start))" "$([ $rc = 0 ] && echo clean || echo "stopped (exit $rc): see $log")" >> "$here/summary.tsv"
}

lane() { # core targets...
    local core=$1
    shift
    for t in "$@"; do one "$core" "$t"; done
}

if [ $# -gt 0 ]; then # given targets: one after another on the second core
    lane 1 "$@"
    exit
fi
lane 0 expr csv config &
lane 1 parquet kb_import replies &
wait
