#!/usr/bin/env python3
"""How many alphas of the recorded mining runs mix units (`alphaloop eval --file --json`
gives each formula's `units` finding), by status. Reads the run logs kept by the earlier
experiments; writes results.md beside this file.

    experiments/2026-11-28-units-check/check_logs.py [ALPHALOOP_BINARY]
"""
import collections, json, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/alphaloop/target")), "release", "alphaloop")
DATA = os.path.join(ROOT, "..", "shared", "data", "sp500_sample.parquet")  # units do not depend on the data
LOGS = [
    ("llm100", "experiments/2026-11-22-mine-100/logs/llm100.log.jsonl", "local 0.5B model, writer/judge loop, KB retrieval"),
    ("nokb100", "experiments/2026-11-22-mine-100/logs/nokb100.log.jsonl", "the same without the KB (no retrieval, no novelty check)"),
    ("gp100", "experiments/2026-11-22-mine-100/logs/gp100.log.jsonl", "--writer gp"),
    ("loop-ab before", "experiments/2026-11-27-loop-ab/logs/before.log.jsonl", "local model, the loop before its rounds changed"),
    ("loop-ab after", "experiments/2026-11-27-loop-ab/logs/after.log.jsonl", "local model, the loop after them"),
    ("units off", "experiments/2026-11-28-units-check/logs/off.log.jsonl", "local model, check_units = false (run.sh)"),
    ("units on", "experiments/2026-11-28-units-check/logs/on.log.jsonl", "local model, check_units = true (run.sh)"),
]


def toml_str(s):
    return json.dumps(s)  # a JSON string is a valid TOML basic string


def main():
    rows, examples = [], []
    for arm, path, what in LOGS:
        if not os.path.exists(os.path.join(ROOT, path)):
            continue
        outcomes = [json.loads(l) for l in open(os.path.join(ROOT, path))]
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            for o in outcomes:
                f.write("[[alpha]]\nid = %s\nformula = %s\n\n" % (toml_str(o["record_id"]), toml_str(o["code"])))
        out = subprocess.run([BIN, "eval", "--data", DATA, "--period", "all", "--json", "--file", f.name], capture_output=True, text=True, check=True)
        os.unlink(f.name)
        found = {r["id"]: r.get("units") for r in json.loads(out.stdout)}
        total, mixed = collections.Counter(), collections.Counter()
        for o in outcomes:
            total[o["status"]] += 1
            if found.get(o["record_id"]):
                mixed[o["status"]] += 1
                if o["status"] == "accepted":
                    examples.append((arm, o["record_id"], o["code"], found[o["record_id"]], o.get("valid_rank_ic")))
        rows.append((arm, what, sum(total.values()), sum(mixed.values()), total["accepted"], mixed["accepted"]))
    lines = [
        "# Results: units in the recorded runs",
        "",
        "Produced by `check_logs.py` from the run logs of `experiments/2026-11-22-mine-100` and",
        "`experiments/2026-11-27-loop-ab` (each idea's final alpha), mined before the units check",
        "existed, and of this experiment's two arms (`run.sh`). A formula \"mixes units\" where",
        "`expr::units` finds a sum, difference,",
        "comparison or pair of branches of unlike quantities.",
        "",
        "| run | what | ideas | final alphas that mix units | accepted | accepted that mix units |",
        "|---|---|---|---|---|---|",
    ]
    for arm, what, n, m, a, am in rows:
        lines.append(f"| {arm} | {what} | {n} | {m} ({100 * m / n:.0f} %) | {a} | {am} |")
    n, m, a, am = (sum(r[i] for r in rows) for i in (2, 3, 4, 5))
    lines.append(f"| all | | {n} | {m} ({100 * m / n:.0f} %) | {a} | {am} ({100 * am / a:.0f} %) |")
    lines += ["", "The accepted ones that mix units:", "", "| run | record | formula | what it mixes | valid Rank IC |", "|---|---|---|---|---|"]
    for arm, rid, code, u, v in examples:
        code = (code if len(code) <= 90 else code[:89] + "…").replace("|", "\\|")  # a cell's bar
        lines.append(f"| {arm} | {rid} | `{code}` | {u} | {v:.4f} |")
    open(os.path.join(HERE, "results.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
