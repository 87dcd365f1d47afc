#!/usr/bin/env python3
"""A stand-in for the job's interpreter in the hostile-input tests: records exactly what the job
script would have started torchrun with (argv, environment, working directory) and exits 0."""
import json
import os
import sys

base = os.environ.get("HOSTILE_RECORD")
if base:
    with open(f"{base}-{os.getpid()}.json", "w") as f:
        json.dump({"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}, f)
