"""A rank program for the hostile-input tests: records exactly what it received — its argv, its
environment, its working directory and its own path — in RUN_DIR/results/rank-R.json."""
import json
import os
import sys

out = os.path.join(os.environ["HPCTRAIN_RUN_DIR"], "results")
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, f"rank-{os.environ.get('RANK', '0')}.json"), "w") as f:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(),
               "script": os.path.abspath(sys.argv[0])}, f)
