"""The 38 alphas the stand-alone bars accepted in ../2026-11-22-mine-100 (llm100, gp100,
nokb100, each in its log's order) as a JSON import: records of their runs at horizon
HORIZON (gap 1), their order kept by creation time. Usage: mined38.py OUT.json HORIZON,
from the repository's root."""
import json
import sys

logs = "experiments/2026-11-22-mine-100/logs/"
recs, t = [], 1_800_000_000
for run in ("llm100", "gp100", "nokb100"):
    for line in open(logs + run + ".log.jsonl"):
        o = json.loads(line)
        if o["status"] == "accepted":
            t += 1
            recs.append({"id": o["record_id"], "code": o["code"], "status": {"state": "accepted"}, "run_id": run, "created_at": t, "horizon": int(sys.argv[2]), "gap": 1})
json.dump(recs, open(sys.argv[1], "w"))
