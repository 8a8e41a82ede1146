#!/usr/bin/env python3
"""Compares two `alphaloop eval --json` outputs number by number.

    benches/compare_json.py A.json B.json [REL_TOL]

Passes when every number agrees to REL_TOL (relative, default 1e-12, with an absolute
floor of REL_TOL for values near zero) and every null, string and key matches. Used by
benches/ab.sh when a change may reorder floating-point sums (AB_TOL=...): the last bits
of a metric then differ, and nothing more may.
"""
import json
import sys


def walk(a, b, path, tol, bad):
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            bad.append(f"{path}: keys {sorted(a)} vs {sorted(b)}")
            return 0.0
        return max([walk(a[k], b[k], f"{path}.{k}", tol, bad) for k in a] or [0.0])
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            bad.append(f"{path}: {len(a)} vs {len(b)} items")
            return 0.0
        return max([walk(x, y, f"{path}[{i}]", tol, bad) for i, (x, y) in enumerate(zip(a, b))] or [0.0])
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        d = abs(a - b) / max(abs(a), abs(b), 1.0)
        if d > tol:
            bad.append(f"{path}: {a!r} vs {b!r}")
        return d
    if a != b:
        bad.append(f"{path}: {a!r} vs {b!r}")
    return 0.0


def main():
    a, b = (json.load(open(p)) for p in sys.argv[1:3])
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-12
    bad = []
    worst = walk(a, b, "$", tol, bad)
    for line in bad[:20]:
        print(line)
    print(f"largest relative difference {worst:.3g}; {len(bad)} beyond {tol:g}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
