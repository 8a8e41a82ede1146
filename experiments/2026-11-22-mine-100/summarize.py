#!/usr/bin/env python3
"""Turns the arms' run logs into results.md: per arm, ideas, acceptance rate, best and
median valid Rank IC of accepted alphas by generation (10 ideas), tokens, time, ideas/hour,
and the time per idea split into writer, judge, evaluation and KB.

    experiments/2026-11-22-mine-100/summarize.py [RUNS_DIR]   (default ~/.cache/alphaloop/experiments/mine-100/runs;
                                                               experiments/2026-11-22-mine-100/logs holds copies)
"""
import json
import os
import statistics
import sys

runs = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/alphaloop/experiments/mine-100/runs")
out = [
    "| arm | ideas | accepted | rate | best valid Rank IC | median valid Rank IC (accepted) | tokens | seconds per idea (mean / median) | ideas per hour |",
    "|---|---|---|---|---|---|---|---|---|",
]
split = ["", "| arm | writer | judge | evaluation | KB | evaluation + KB share |", "|---|---|---|---|---|---|"]
by_gen = ["", "| arm | generation | ideas | accepted | best valid Rank IC | median valid Rank IC (accepted) |", "|---|---|---|---|---|---|"]
for arm in ("llm100", "gp100", "nokb100"):
    path = os.path.join(runs, arm, "log.jsonl")
    if not os.path.exists(path):
        path = os.path.join(runs, arm + ".log.jsonl")  # the copies in logs/
    if not os.path.exists(path):
        continue
    rows = [json.loads(line) for line in open(path) if line.strip()]
    if not rows:
        continue
    acc = [r for r in rows if r["status"] == "accepted"]
    valid = [r["valid_rank_ic"] for r in acc if r.get("valid_rank_ic") is not None]
    tokens = sum(r["prompt_tokens"] + r["completion_tokens"] for r in rows)
    per_idea = [sum(r["timings"].values()) for r in rows]
    secs = sum(per_idea)
    fmt = lambda v: f"{v:.4f}" if v is not None else "n/a"
    out.append(
        f"| {arm} | {len(rows)} | {len(acc)} | {len(acc) / len(rows):.0%} | {fmt(max(valid) if valid else None)} | "
        f"{fmt(statistics.median(valid) if valid else None)} | {tokens} | {secs / len(rows):.1f} / {statistics.median(per_idea):.1f} | {3600 * len(rows) / max(secs, 1e-9):.0f} |"
    )
    parts = {k: sum(r["timings"].get(k, 0.0) for r in rows) / len(rows) for k in ("writer", "judge", "eval", "kb")}
    split.append(
        f"| {arm} | {parts['writer']:.1f} s | {parts['judge']:.1f} s | {parts['eval']:.2f} s | {parts['kb']:.2f} s | "
        f"{(parts['eval'] + parts['kb']) / max(sum(parts.values()), 1e-9):.1%} |"
    )
    for g in range(0, len(rows), 10):
        chunk = rows[g : g + 10]
        va = [r["valid_rank_ic"] for r in chunk if r["status"] == "accepted" and r.get("valid_rank_ic") is not None]
        by_gen.append(
            f"| {arm} | {g // 10} | {len(chunk)} | {len(va)} | {fmt(max(va) if va else None)} | {fmt(statistics.median(va) if va else None)} |"
        )
print("\n".join(out + split + by_gen))
