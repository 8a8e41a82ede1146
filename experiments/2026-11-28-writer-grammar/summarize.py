#!/usr/bin/env python3
"""Per arm: ideas, accepted, errors, LLM calls that ran to the token limit by role, tokens, time;
then each idea's outcome.

    summarize.py LOGS_DIR RUNS_DIR    (run.sh passes them; writes LOGS_DIR/ARM.calls.tsv)
"""
import collections, json, sys
from pathlib import Path

logs, runs = Path(sys.argv[1]), Path(sys.argv[2])
ARMS = ("before", "after")
ROLES = {"You are a quantitative researcher who writes formulaic": "writer", "You review formulaic": "judge"}


def role(system):
    return next((r for p, r in ROLES.items() if system.startswith(p)), "other")


print("| arm | ideas | accepted | errors (of them cut off at the limit) | writer replies at the limit | other replies at the limit | tokens | seconds |")
print("|---|---|---|---|---|---|---|---|")
for arm in ARMS:
    log = [json.loads(l) for l in open(logs / f"{arm}.log.jsonl")]
    hit, total, rows = collections.Counter(), collections.Counter(), []
    for line in open(runs / arm / "replies.jsonl"):
        c = json.loads(line)
        rq, rp = c["request"], c["reply"]
        r = role(rq["system"])
        total[r] += 1
        hit[r] += rp["completion_tokens"] >= rq["max_tokens"]
        rows.append(f"{r}\t{rp['completion_tokens']}\t{rq['max_tokens']}")
    (logs / f"{arm}.calls.tsv").write_text("role\tcompletion_tokens\tmax_tokens\n" + "\n".join(rows) + "\n")
    errors = [o for o in log if o["status"] == "error"]
    cut = sum("cut off" in (o.get("reason") or "") for o in errors)
    acc = sum(o["status"] == "accepted" for o in log)
    tokens = sum(o["prompt_tokens"] + o["completion_tokens"] for o in log)
    secs = sum(sum(o["timings"].values()) for o in log)
    others = total["judge"] + total["other"]
    print(f"| {arm} | {len(log)} | {acc} | {len(errors)} ({cut}) | {hit['writer']} of {total['writer']} | {hit['judge'] + hit['other']} of {others} | {tokens:,} | {secs:.0f} |")
for arm in ARMS:
    print(f"\n{arm}:")
    for line in open(logs / f"{arm}.log.jsonl"):
        o = json.loads(line)
        print(f"  {o['record_id']:>12}  {o['status']:>8}  {(o.get('reason') or '')[:56]:56}  {o['code'][:80]}")
