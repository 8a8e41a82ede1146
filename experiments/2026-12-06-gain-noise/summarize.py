"""Summarises `kb judge --json --null` reports: per alpha and pooled, the share of shuffles
the rule accepted and the share whose gain t reaches each bar."""
import json
import sys

rows, pooled = [], []
for path in sys.argv[1:]:
    r = json.load(open(path))
    ts = [t for t in r["null"]["gain_t"] if t is not None]
    pooled += ts
    rows.append((r["expr"][:60], r["null"]["draws"], r["null"]["accepted"], ts))

def share(ts, bar):
    return sum(t >= bar for t in ts) / max(len(ts), 1)

bars = [1.5, 2.0, 2.5, 3.0]
print("| alpha | draws | accepted | " + " | ".join(f"t >= {b}" for b in bars) + " | median t |")
print("|---|---|---|" + "---|" * len(bars) + "---|")
for name, n, acc, ts in rows:
    med = sorted(ts)[len(ts) // 2] if ts else float("nan")
    print(f"| `{name}` | {n} | {acc} | " + " | ".join(f"{share(ts, b):.3f}" for b in bars) + f" | {med:.2f} |")
med = sorted(pooled)[len(pooled) // 2] if pooled else float("nan")
print(f"| all | {sum(r[1] for r in rows)} | {sum(r[2] for r in rows)} | " + " | ".join(f"{share(pooled, b):.3f}" for b in bars) + f" | {med:.2f} |")
