"""Writes the overnight experiment's results (markdown, to stdout) from the files run.sh
leaves beside it:

  run-ARM.json                 `runs show ARM --json`: protocol, multiple testing, growth
  train-ARM-hH.json            `train` over the arm's accepted mined alphas; its baselines
                               hold the alpha101 seeds through the same model
  train-alpha158-hH.json       Qlib's Alpha158 through the same model
  train-seeds-hH.json          the alpha101 seeds through the same model
combination-KIND-hH.json     `eval --period train,valid,test` of the signed mean written as
                               one expression (not shown: NaN wherever any member is, it
                               covers 14-41 % of the stock-days; the table's signed mean is
                               `train`'s equal-weight baseline, which skips missing members)

Usage: python3 summarise.py DIR > DIR/results.md
Every figure on test sits beside its baselines; the test period was never seen while
mining (the protocol says which periods were)."""
import json
import os
import sys

d = sys.argv[1]
ARMS = ["llm", "gp"]
HORIZONS = [1, 5]


def load(name):
    p = os.path.join(d, name)
    return json.load(open(p)) if os.path.exists(p) else None


def f(x, digits=4):
    return "-" if x is None or x != x else f"{x:.{digits}f}"


def split(report, s, key):
    return (report or {}).get(s, {}).get(key)


out = []
p = out.append
p("# Overnight: results\n")
runs = {a: load(f"run-{a}.json") for a in ARMS}

p("## Protocol\n")
for a, r in runs.items():
    if not r:
        p(f"- `{a}`: not run yet")
        continue
    proto = r.get("protocol") or {}
    mt = r.get("multiple_testing") or {}
    p(f"- `{a}`: " + "; ".join(f"{k} {json.dumps(v)}" for k, v in proto.items()))
    p(f"  - candidates evaluated on valid: {mt.get('candidates_on_valid')}; the Bonferroni bar for them at 5 %: t ≥ {f(mt.get('bonferroni_t_5pct'), 2)}")
p("")

p("## The runs\n")
p("| arm | ideas | accepted | candidates on valid | evaluations | tokens | hours | combination valid Rank IC: seeds → end |")
p("|---|---|---|---|---|---|---|---|")
for a, r in runs.items():
    if not r:
        continue
    c = r.get("combination") or {}
    p(f"| {a} | {r['ideas']} | {r['accepted']} | {r['attempts']} | {r['evaluations']} | {r['tokens']:,} | {r['seconds'] / 3600:.1f} | {f(c.get('start'))} → {f(c.get('now'))} |")
p("")
# The hours are wall-clock hours of each run. Both arms were stopped together (SIGSTOP)
# while the project's test suite ran on the same two cores; those pauses count against the
# 8 hours of both alike. The stops and restarts logged are summed here.
log = os.path.join(os.environ.get("ALPHALOOP_CACHE", os.path.expanduser("~/.cache/alphaloop")), "experiments/2026-12-07-overnight/pauses.log")
if os.path.exists(log):
    from datetime import datetime
    paused, since = 0.0, None
    for line in open(log):
        what, at = line.split()
        t = datetime.fromisoformat(at)
        if what == "stopped":
            since = t
        elif what == "continued" and since is not None:
            paused += (t - since).total_seconds()
            since = None
    p(f"Both arms ran at once, one core each, and were paused together while the test suite ran on the same machine: {paused / 3600:.1f} hours of the logged pauses (from 2026-12-07; earlier pauses were not logged) fall inside each arm's wall-clock hours above.\n")
for a, r in runs.items():
    hours = ((r or {}).get("combination") or {}).get("by_hour") or []
    if hours:
        p(f"`{a}`, the combination's valid Rank IC by hour (accepted so far): " + ", ".join(f"{h['at']} h {f(h.get('combination'))} ({h['accepted']})" for h in hours))
        p("")

for h in HORIZONS:
    p(f"## Test, horizon {h}\n")
    p("| set | through | valid Rank IC | test Rank IC | test IC | test ICIR | test net Sharpe | test turnover |")
    p("|---|---|---|---|---|---|---|---|")
    rows = []
    for a in ARMS:
        t = load(f"train-{a}-h{h}.json")
        if t:
            rows.append((f"{a}: mined alphas", "XGBoost", t))
            seeds = (t.get("baselines") or {}).get("seeds_model")
            if seeds:
                rows.append(("alpha101 seeds", "XGBoost", seeds))
    t = load(f"train-alpha158-h{h}.json")
    if t:
        rows.append(("Alpha158", "XGBoost", t))
    # The signed mean, nothing fitted: each member's per-date rank (centred) with the sign
    # of its train Rank IC, averaged over the members that have a value for that stock and
    # date (`train`'s equal-weight baseline).
    for a in ARMS:
        t = load(f"train-{a}-h{h}.json")
        if t:
            rows.append((f"{a}: mined alphas", "signed mean", t["baselines"]["equal_weight"]))
    for name, file in [("alpha101 seeds", f"train-seeds-h{h}.json"), ("Alpha158", f"train-alpha158-h{h}.json")]:
        t = load(file)
        if t:
            rows.append((name, "signed mean", t["baselines"]["equal_weight"]))
            if name == "alpha101 seeds":
                rows.append((name, "XGBoost", t))
    seen = set()
    for name, how, rep in rows:
        if (name, how) in seen:
            continue
        seen.add((name, how))
        p(f"| {name} | {how} | {f(split(rep, 'valid', 'rank_ic'))} | {f(split(rep, 'test', 'rank_ic'))} | {f(split(rep, 'test', 'ic'))} | {f(split(rep, 'test', 'icir'), 3)} | {f(split(rep, 'test', 'sharpe'), 2)} | {f(split(rep, 'test', 'turnover'), 3)} |")
    p("")
    for a, r in runs.items():
        if r and r.get("accepted") == 0:
            p(f"- `{a}` accepted no alpha: it has no mined set to train or combine; its row would be the seeds'.")
    # The target: the mined set beats both published sets through the same model.
    for a in ARMS:
        t = load(f"train-{a}-h{h}.json")
        a158 = load(f"train-alpha158-h{h}.json")
        if not (t and a158 and (t.get("baselines") or {}).get("seeds_model")):
            continue
        seeds = t["baselines"]["seeds_model"]
        ric, sh = split(t, "test", "rank_ic"), split(t, "test", "sharpe")
        beats = all(x is not None and y is not None and x > y for x, y in [(ric, split(seeds, "test", "rank_ic")), (ric, split(a158, "test", "rank_ic")), (sh, split(seeds, "test", "sharpe")), (sh, split(a158, "test", "sharpe"))])
        verdict = "beats" if beats else "does not beat"
        extra = ""
        if h == 1:
            extra = f"; test Rank IC {f(ric)} against the 0.015 aim, net Sharpe {f(sh, 2)} against 0.5"
        p(f"- `{a}` at horizon {h}: the mined set through the model {verdict} the alpha101 seeds and Alpha158 through the same model on test Rank IC and net Sharpe{extra}.")
    p("")
print("\n".join(out))
