#!/usr/bin/env python3
"""Per arm: ideas, accepted (and how many distinct), writer replies that copy or extend an
accepted alpha shown in their own prompt, replies that copy a worked example of the prompt
(both up to windows and constants), replies that use a window the idea names, replies at
the token limit, judge calls, tokens, time; then each idea's outcome.

    summarize.py LOGS_DIR RUNS_DIR    (run.sh passes them; writes LOGS_DIR/ARM.writer.tsv)
"""
import json, re, sys
from pathlib import Path

logs, runs = Path(sys.argv[1]), Path(sys.argv[2])
ARMS = [a for a in ("before", "after", "restated", "noreview") if (logs / f"{a}.log.jsonl").exists()]
WRITER = "You are a quantitative researcher who writes formulaic"
EXAMPLES = [
    "rank(close / delay(close, 40))",
    "-1 * rank((close - ts_min(low, 10)) / (ts_max(high, 10) - ts_min(low, 10)))",
    "-1 * rank(ts_sum((returns < 0) * volume, 10) / ts_sum(volume, 10))",
]


def norm(code):
    """Spacing, case, numbers (windows, constants) and the outer brackets aside: a copy
    with another window is still a copy of the shape."""
    s = re.sub(r"\d+(\.\d+)?", "#", re.sub(r"\s+", "", code.lower()))
    while s.startswith("(") and s.endswith(")"):
        s = s[1:-1]
    return s


def shown(user):
    """The accepted alphas listed in a writer prompt."""
    out, inside = [], False
    for line in user.splitlines():
        if line.startswith("Accepted alphas"):
            inside = True
        elif inside and line.startswith("- "):
            out.append(re.sub(r"\s+\(valid Rank IC [^)]*\)$", "", line[2:]))
        elif inside:
            inside = False
    return out


def windows(text):
    """Day counts an idea names ("20-day", "5 days", "a month" = 20)."""
    w = set(re.findall(r"(\d+)[- ]day", text))
    if "month" in text:
        w.add("20")
    if "week" in text:
        w.add("5")
    return w


print("| arm | ideas | accepted (distinct) | writer replies | copy or extend a shown accepted alpha | copy a worked example | use a window the idea names (of replies whose idea names one) | at the limit | judge calls | tokens | seconds |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for arm in ARMS:
    log = [json.loads(l) for l in open(logs / f"{arm}.log.jsonl")]
    n = copies = examples = limit = named = named_used = judge = 0
    rows = []
    for line in open(runs / arm / "replies.jsonl"):
        c = json.loads(line)
        rq, rp = c["request"], c["reply"]
        if rq["system"].startswith("You review"):
            judge += 1
        if not rq["system"].startswith(WRITER):
            continue
        user = rq["messages"][-1]["content"]
        reply = rp["text"].strip()
        r = norm(reply)
        n += 1
        copy = any(norm(s) and norm(s) in r for s in shown(user))
        example = any(norm(e) in r for e in EXAMPLES)
        idea = user.splitlines()[0]
        w = windows(idea)
        used = bool(w) and any(re.search(rf"[,(]\s*{x}\s*\)", reply) for x in w)
        copies += copy
        examples += example
        limit += rp["completion_tokens"] >= rq["max_tokens"]
        named += bool(w)
        named_used += used
        rows.append(f"{int(copy)}\t{int(example)}\t{int(used) if w else ''}\t{reply}")
    (logs / f"{arm}.writer.tsv").write_text("copies_shown\tcopies_example\tuses_named_window\treply\n" + "\n".join(rows) + "\n")
    acc = [o for o in log if o["status"] == "accepted"]
    tokens = sum(o["prompt_tokens"] + o["completion_tokens"] for o in log)
    secs = sum(sum(o["timings"].values()) for o in log)
    distinct = len({re.sub(r"\s+", "", o["code"].lower()) for o in acc})
    print(f"| {arm} | {len(log)} | {len(acc)} ({distinct}) | {n} | {copies} | {examples} | {named_used} of {named} | {limit} | {judge} | {tokens:,} | {secs:.0f} |")
for arm in ARMS:
    print(f"\n{arm}:")
    for line in open(logs / f"{arm}.log.jsonl"):
        o = json.loads(line)
        print(f"  {o['record_id']:>12}  {o['idea']:>12}  {o['status']:>8}  {(o.get('reason') or '')[:48]:48}  {o['code'][:90]}")
