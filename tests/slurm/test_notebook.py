"""examples/notebook_submit.ipynb, executed headless against the real local Slurm cluster."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm
NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "notebook_submit.ipynb"


def _text(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(o["text"])
        elif "data" in o:
            out.append(o["data"].get("text/plain", ""))
        elif o.get("output_type") == "error":
            out.append("\n".join(o.get("traceback", [])))
    return "".join(out)


def test_notebook_is_stored_without_outputs():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") and c.get("execution_count") is None
               for c in nb.cells if c.cell_type == "code")


def test_notebook_runs_on_the_cluster(home, cluster, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # The kernel must be this interpreter (the one with hpctrain installed), whatever kernels
    # the machine has registered: a kernelspec written for it into a private directory.
    kdir = tmp_path / "kernels" / "hpctrain-test"
    kdir.mkdir(parents=True)
    (kdir / "kernel.json").write_text(
        '{"argv": ["%s", "-m", "ipykernel_launcher", "-f", "{connection_file}"], '
        '"display_name": "hpctrain-test", "language": "python"}' % sys.executable)
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    client = nbclient.NotebookClient(nb, timeout=400, kernel_name="hpctrain-test",
                                     resources={"metadata": {"path": str(NOTEBOOK.parents[1])}})
    client.execute()
    text = "\n".join(_text(c) for c in nb.cells if c.cell_type == "code")
    assert "2 nodes x 2 ranks on localcluster" in text
    assert "state: COMPLETED" in text, text
    assert "world size: 4" in text
    assert "all-reduce: 6.0" in text  # 0+1+2+3
    assert "nodes: node" in text and text.split("nodes: ", 1)[1].split("\n")[0].count(",") == 1
    assert "function: allreduce" in text
    assert "<hpctrain run " in text  # the handle's repr
