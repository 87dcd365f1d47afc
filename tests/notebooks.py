"""Running notebooks headless in a real Jupyter kernel (nbclient + ipykernel), for the tests that
execute a notebook on this machine or on the test cluster's laptop."""
from __future__ import annotations

import json
from pathlib import Path

KERNEL = "hpctrain-test"


def kernelspec(root: Path, python: str) -> Path:
    """A kernelspec named KERNEL for `python` (the interpreter with hpctrain installed), under
    ROOT/kernels: point JUPYTER_PATH at ROOT, whatever kernels the machine has registered."""
    kdir = root / "kernels" / KERNEL
    kdir.mkdir(parents=True, exist_ok=True)
    (kdir / "kernel.json").write_text(json.dumps({
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": KERNEL, "language": "python"}))
    return root


def cell_text(cell) -> str:
    """What a code cell showed: its streams, results and errors (tracebacks included)."""
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(o["text"])
        elif "data" in o:
            out.append(o["data"].get("text/plain", ""))
        elif o.get("output_type") == "error":
            out.append("\n".join(o.get("traceback", [])))
    return "".join(out)


# Executes the notebook ARGV[1] in the KERNEL kernel, in the directory ARGV[2], and writes it
# back with its outputs: `python -c RUN_NOTEBOOK NOTEBOOK DIR` (on the laptop: on-laptop.sh).
RUN_NOTEBOOK = f"""
import sys
import nbclient, nbformat
nb = nbformat.read(sys.argv[1], as_version=4)
client = nbclient.NotebookClient(nb, timeout=400, kernel_name={KERNEL!r},
                                 resources={{"metadata": {{"path": sys.argv[2]}}}})
try:
    client.execute()
finally:
    nbformat.write(nb, sys.argv[1])
"""
