"""`pip install .` (a real wheel, not editable) gives a working hpctrain with its data files."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_ships_templates_and_sites_and_runs(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(ROOT)], check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("hpctrain-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for backend in ("slurm", "local"):
        assert f"hpctrain/templates/{backend}/job.sh.j2" in names
    assert "hpctrain/templates/parts/rendezvous.sh.j2" in names
    assert "hpctrain/site_configs/localcluster.yaml" in names
    # Every module of the source tree, every template and site profile: a package left out of
    # the wheel (as hpctrain.search.pbt was, when the packages were listed by hand) fails here.
    # The rank side's too: each run gets a copy of them all.
    source = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "hpctrain").rglob("*.py"))
    assert "hpctrain/rank/before/bootstrap.py" in source and "hpctrain/search/pbt/member.py" in source
    assert [p for p in source if p not in names] == []
    data = sorted(f"hpctrain/{p.relative_to(ROOT)}" for folder in ("templates", "site_configs")
                  for p in (ROOT / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert len(data) > 30 and [p for p in data if p not in names] == []

    # A fresh venv with the wheel and its declared dependencies only, away from the source tree.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
                   check=True, capture_output=True)
    job = tmp_path / "job.yaml"
    job.write_text("name: w\nscript: train.py\nresources: {nodes: 2, procs_per_node: 2}\n")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([str(venv / "bin" / "hpctrain"), "render", str(job), "--site", "localcluster"],
                         cwd=tmp_path, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "#SBATCH --nodes=2" in out.stdout
    where = subprocess.run([str(py), "-c", "import hpctrain; print(hpctrain.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True, env=env).stdout
    assert str(venv) in where  # the installed copy, not the source tree
    out = subprocess.run([str(py), "-m", "hpctrain", "--version"], cwd=tmp_path, capture_output=True,
                         text=True, env=env)
    assert out.stdout.startswith("hpctrain ")


def test_the_tiers_hpctrain_is_the_installed_wheel_under_test_all(tmp_path):
    """test-all.sh installs .venv the README's way (a built wheel) and gives the sessions its
    `hpctrain` (HPCTRAIN_TEST_CLI): the `cli` fixture must run that copy, not the source tree's,
    or a module the wheel lacks would pass unseen. Run by hand, without it, the fixture runs this
    checkout's."""
    from tests.conftest import HPCTRAIN, INSTALLED_CLI
    if INSTALLED_CLI:
        assert HPCTRAIN == [INSTALLED_CLI]
        python = Path(INSTALLED_CLI).parent / "python"
        where = subprocess.run([str(python), "-c", "import hpctrain; print(hpctrain.__file__)"],
                               cwd=tmp_path, capture_output=True, text=True, check=True).stdout
        assert "site-packages" in where and not where.startswith(str(ROOT / "hpctrain")), where
    else:
        assert HPCTRAIN == [sys.executable, "-m", "hpctrain"]
    out = subprocess.run([*HPCTRAIN, "--version"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("hpctrain "), out
