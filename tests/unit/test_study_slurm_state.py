"""A study's state on Slurm (issue 41 item 4: `cancel` ends every worker) - no process started."""


def test_a_study_on_slurm_is_running_while_any_worker_runs(tmp_path):
    """A study's workers are an array without array_size: its state is every worker's, not the
    state of the task that carries the array's own id (Slurm gives it to one task: when that
    worker ended first, status said COMPLETED and `cancel` did nothing)."""
    from hpctrain.backends.base import State
    from hpctrain.backends.slurm.backend import SlurmBackend
    from hpctrain.backends.slurm.records import Record
    from hpctrain.rank.records import RunRecord
    from hpctrain.runs.records import Run
    RunRecord(run_id="r", name="s", site="localcluster", backend="slurm", job_id="7", kind="study",
              parallel=2).save(str(tmp_path / "run.json"))
    records = [Record(job_id="7", array_job_id="7", task=1, state="COMPLETED", exit_code=0),
               Record(job_id="8", array_job_id="7", task=0, state="RUNNING")]
    st = SlurmBackend.state_of(Run(tmp_path), records)
    assert st.state == State.RUNNING and [t.state for t in st.tasks] == [State.RUNNING, State.COMPLETED]
    records[1] = Record(job_id="8", array_job_id="7", task=0, state="CANCELLED", exit_code=143)
    assert SlurmBackend.state_of(Run(tmp_path), records).state == State.CANCELLED
