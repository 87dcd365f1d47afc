"""examples/notebook_submit.ipynb, executed headless against the real local Slurm cluster."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.notebooks import KERNEL, cell_text, kernelspec

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "notebook_submit.ipynb"


def test_notebook_is_stored_without_outputs():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") and c.get("execution_count") is None
               for c in nb.cells if c.cell_type == "code")


def test_notebook_runs_on_the_cluster(home, cluster, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    monkeypatch.setenv("JUPYTER_PATH", str(kernelspec(tmp_path, sys.executable)))
    client = nbclient.NotebookClient(nb, timeout=400, kernel_name=KERNEL,
                                     resources={"metadata": {"path": str(NOTEBOOK.parents[1])}})
    client.execute()
    text = "\n".join(cell_text(c) for c in nb.cells if c.cell_type == "code")
    assert "2 nodes x 2 ranks on localcluster" in text
    assert "state: COMPLETED" in text, text
    assert "world size: 4" in text
    assert "all-reduce: 6.0" in text  # 0+1+2+3
    assert "nodes: node" in text and text.split("nodes: ", 1)[1].split("\n")[0].count(",") == 1
    assert "function: allreduce" in text
    assert "<hpctrain run " in text  # the handle's repr
