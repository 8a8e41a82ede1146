"""One row per arm: ideas, accepted, seconds per idea (stages), and the signed-mean
combination's valid Rank IC and net Sharpe over the seeds and the arm's accepted alphas."""
import json
import sys

d = sys.argv[1]
print("| arm | ideas | accepted | s per idea | combination valid Rank IC (seeds alone → with the accepted) | net Sharpe |")
print("|---|---|---|---|---|---|")
for arm in ("gain", "standalone"):
    log = [json.loads(l) for l in open(f"{d}/gp-{arm}.log.jsonl")]
    acc = sum(o["status"] == "accepted" for o in log)
    secs = sum(sum(o["timings"].values()) for o in log) / len(log)
    r = json.load(open(f"{d}/recheck-{arm}.json"))["recheck"]
    seeds_only = None
    for a in r["alphas"]:
        if a.get("gain") and a["gain"]["set_size"] == r["base"]:
            seeds_only = a["gain"]["rank_ic_before"]
            break
    s = f"{seeds_only:.4f}" if seeds_only is not None else "-"
    print(f"| {arm} | {len(log)} | {acc} | {secs:.1f} | {s} → {r['before']['rank_ic']:.4f} | {r['before']['sharpe']:.2f} |")
