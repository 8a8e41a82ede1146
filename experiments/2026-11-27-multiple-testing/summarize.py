"""Buckets `kb holdout --json` (stdin) by the valid t-statistic: how many alphas, how
many kept valid's sign on test, how many were significant on test with that sign."""
import json
import sys

rows = [r for r in json.load(sys.stdin) if r["valid_t"] is not None and r["test_t"] is not None]
bar, attempts = rows[0]["bar_t"], rows[0]["attempts"]
print(f"{len(rows)} alphas with a valid and a test t; Bonferroni's bar for {attempts} attempts: |t| >= {bar:.2f}")
print(f"{'valid t':<24} {'alphas':>6} {'test kept the sign':>19} {'test |t| >= 1.96, same sign':>28}")
for name, keep in [(f"|t| >= {bar:.2f}", lambda v: abs(v) >= bar), (f"1.96 <= |t| < {bar:.2f}", lambda v: 1.96 <= abs(v) < bar), ("|t| < 1.96", lambda v: abs(v) < 1.96)]:
    sel = [r for r in rows if keep(r["valid_t"])]
    same = [r for r in sel if (r["valid_t"] > 0) == (r["test_t"] > 0)]
    sig = [r for r in same if abs(r["test_t"]) >= 1.96]
    print(f"{name:<24} {len(sel):>6} {len(same):>19} {len(sig):>28}")
for r in rows:
    if abs(r["valid_t"]) >= bar:
        print(f"{r['id']}: valid t {r['valid_t']:.2f}, test t {r['test_t']:.2f}")
