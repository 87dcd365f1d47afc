"""How a RUN argument (`hpctrain status 1`) finds its run in the index."""
import json

import pytest

from hpctrain.errors import HpctrainError
from hpctrain.runs import records


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """Three indexed runs: job 1 (id ending 2b1c), job 2 (id ending ebc1), job 31 (id ending 0bc1)."""
    monkeypatch.setenv("HPCTRAIN_HOME", str(tmp_path / "home"))
    found = {}
    lines = []
    for job_id, run_id in (("1", "20261127-061559-2b1c"), ("2", "20261127-061601-ebc1"),
                           ("31", "20261127-061602-0bc1")):
        path = tmp_path / "runs" / run_id
        path.mkdir(parents=True)
        (path / records.RECORD).write_text("{}")
        found[job_id] = path
        lines.append(json.dumps({"run_id": run_id, "path": str(path), "job_id": job_id}))
    records.index_path().parent.mkdir(parents=True)
    records.index_path().write_text("\n".join(lines) + "\n")
    return found


def test_a_job_id_is_not_also_the_end_of_another_runs_id(runs):
    # "1" and "31" end other runs' ids too (ebc1, 0bc1): job 1 is meant (a new cluster numbers its jobs from 1).
    assert records.find("1").path == runs["1"]
    assert records.find("31").path == runs["31"]
    assert records.find("1_4").path == runs["1"]  # an array task of job 1


def test_the_end_of_a_run_id_finds_it_when_no_whole_id_matches(runs):
    assert records.find("ebc1").path == runs["2"]
    assert records.find("20261127-061602-0bc1").path == runs["31"]
    with pytest.raises(HpctrainError, match="'bc1' matches 2 runs") as err:
        records.find("bc1")
    assert "give the whole run id" in err.value.fix
