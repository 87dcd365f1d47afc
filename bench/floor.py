"""The floor: the least any generator built on PyYAML + Jinja2 must do for one job script.

Load the job file (libyaml's loader), compile one template (no cache, no schema, no site
profile, no checks), render it. A sweep also expands the grid into per-task exports.
    python bench/floor.py JOB.yaml [NODES]
"""
import itertools
import shlex
import sys
from pathlib import Path

import jinja2
import yaml

path, nodes = sys.argv[1], (int(sys.argv[2]) if len(sys.argv) > 2 else None)
job = yaml.load(Path(path).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
if nodes:
    job["resources"]["nodes"] = nodes
variants = []
sweep = job.get("sweep") or {}
if sweep:
    keys = list(sweep.get("grid", {}))
    for values in itertools.product(*sweep["grid"].values()):
        for seed in sweep.get("seeds") or [job.get("seed")]:
            pairs = [f"export {k.split('.')[-1]}={shlex.quote(str(v))}" for k, v in zip(keys, values)]
            variants.append("; ".join(pairs + [f"export SEED={seed}"]))
env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(__file__).parent)),
                         undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                         keep_trailing_newline=True)
env.filters["q"] = lambda v: shlex.quote(str(v))
sys.stdout.write(env.get_template("floor.sh.j2").render(job=job, env=job.get("env", {}),
                                                        variants=variants))
