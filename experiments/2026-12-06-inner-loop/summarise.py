"""Summarises the arms of run.sh: one markdown table from each arm's run summary
(ARM.json), its recorded replies (ARM.replies.jsonl) and its records (exported from the
arm's KB with the `after` binary), over each arm's first 50 ideas (the `before` run went on
to 60: resumed with `--ideas 50` given again, which means 50 more). The columns read off
the recorded replies (citing, alpha:, the model's speeds) count every reply of the run.

Columns: ideas, accepted alphas, attempts (candidates whose valid metrics were computed),
the accepted set's signed-mean combination's valid Rank IC before the run (the seeds) and
after it (read off the acceptance rule's gains: the last judged record's set with it when
accepted, without it otherwise), rounds whose code failed the rule checks, writer replies
citing a record (USES:) and using an accepted alpha (alpha:), tokens, the model's prompt
and generation speeds (a least-squares fit of each call's seconds to its uncached prompt
tokens and its generated tokens), and the median seconds of an idea (writer, judge,
evaluation and KB; a median, so an idea in flight while the runs were paused for another
job does not move it)."""
import gzip, json, os, subprocess, sys
from statistics import median

here = sys.argv[1]
work = os.path.expanduser(os.environ.get("ALPHALOOP_CACHE", "~/.cache/alphaloop")) + "/experiments/2026-12-06-inner-loop"
arms = ["before", "after-small"]
IDEAS = 50


def records(arm):
    out = subprocess.run([f"{work}/bin/after", "kb", "--kb", f"{work}/kb-{arm}", "export"], capture_output=True, text=True, check=True).stdout
    v = json.loads(out)
    recs = v["records"] if isinstance(v, dict) else v
    return [r for r in recs if r.get("run_id") == arm]


def lines(path):
    """The lines of a recorded replies file, kept gzipped in the repository."""
    return gzip.open(path + ".gz", "rt") if os.path.exists(path + ".gz") else open(path)


def speeds(path):
    rows = []
    for line in lines(path):
        r = json.loads(line).get("reply", {})
        if r.get("seconds", 0) > 0:
            rows.append((r["prompt_tokens"] - r.get("cached_tokens", 0), r["completion_tokens"], r["seconds"]))
    if len(rows) < 3:
        return float("nan"), float("nan")
    # Normal equations of seconds ~ a * prompt + b * generated.
    spp = sum(p * p for p, g, s in rows); spg = sum(p * g for p, g, s in rows); sgg = sum(g * g for p, g, s in rows)
    sps = sum(p * s for p, g, s in rows); sgs = sum(g * s for p, g, s in rows)
    det = spp * sgg - spg * spg
    a = (sps * sgg - sgs * spg) / det
    b = (sgs * spp - sps * spg) / det
    return (1 / a if a > 0 else float("nan")), (1 / b if b > 0 else float("nan"))


def state(r):
    st = r["status"]
    return st.get("state") if isinstance(st, dict) else st


def combination(recs):
    judged = sorted((r for r in recs if r.get("gain")), key=lambda r: r["id"])
    if not judged:
        return float("nan"), float("nan")
    last = judged[-1]["gain"]
    return judged[0]["gain"]["rank_ic_before"], last["rank_ic_after"] if state(judged[-1]) == "accepted" else last["rank_ic_before"]


rows = []
for arm in arms:
    if not os.path.exists(f"{here}/{arm}.json"):
        continue
    s = json.load(open(f"{here}/{arm}.json"))
    # The first 50 ideas: an arm resumed with --ideas given again ran on past them.
    outcomes = s["outcomes"][:IDEAS]
    ids = {o["record_id"] for o in outcomes}
    recs = [r for r in records(arm) if r["id"] in ids]
    rounds = sum(o["rounds"] for o in outcomes) or 1
    rules = sum(1 for r in recs for v in r.get("reviews", []) if v["reviewer"] == "rules")
    replies = [json.loads(l) for l in lines(f"{here}/{arm}.replies.jsonl")]
    writer = [v for v in replies if "writes formulaic" in v.get("request", {}).get("system", "")]
    text = lambda v: v.get("reply", {}).get("text", "")
    cites = sum(1 for v in writer if "USES:" in text(v) and "USES: none" not in text(v))
    refs = sum(1 for v in writer if "alpha:" in text(v))
    before, after = combination(recs)
    pp, gen = speeds(f"{here}/{arm}.replies.jsonl")
    tokens = sum(o["prompt_tokens"] + o["completion_tokens"] for o in outcomes)
    secs = median([sum(o["timings"].values()) for o in outcomes])
    accepted = sum(o["status"] == "accepted" for o in outcomes)
    attempts = sum(o.get("attempts") or (o.get("valid_rank_ic") is not None) for o in outcomes)
    rows.append([arm, len(outcomes), accepted, attempts, f"{before:.4f}", f"{after:.4f}", f"{rules}/{rounds}", f"{cites}/{len(writer)}", f"{refs}/{len(writer)}", f"{tokens:,}", f"{pp:.0f}", f"{gen:.1f}", f"{secs:.1f}"])

head = ["arm", "ideas", "accepted", "attempts", "combination valid Rank IC before", "after", "rule failures / rounds", "writer citing", "writer using alpha:", "tokens", "prompt tok/s", "gen tok/s", "median s / idea"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for r in rows:
    print("| " + " | ".join(str(x) for x in r) + " |")
