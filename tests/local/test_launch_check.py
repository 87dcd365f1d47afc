"""The node check folded into the launch (rank/preflight.launch) and the rank meeting in
torchrun's own store, with the real torchrun on this machine: the head's check holds the very
rendezvous port torchrun binds a moment later, so a check that left it open would fail the
launch; a node or rank that does not arrive is named and no program starts."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

# The rank side as the run directory's copy runs it: by path, a package of its own.
RANK = [sys.executable, "-m", "hpctrain.rank"]

# Every rank: the rank check in torchrun's store, then torch's own process group and a barrier,
# then a line in OUT/rank-R.json. SKIP=R: rank R never meets (a rank stuck before its check).
PROGRAM = textwrap.dedent("""
    import json, os, sys, types
    import torch.distributed as dist
    from hpctrain.rank.before import preflight
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    me = types.SimpleNamespace(rank=rank, world_size=world, node="here",
                               local_world_size=int(os.environ["LOCAL_WORLD_SIZE"]))
    out = {"agent_store": os.environ.get("TORCHELASTIC_USE_AGENT_STORE"),
           "master": os.environ["MASTER_PORT"]}
    if os.environ.get("SKIP") == str(rank):
        import time; time.sleep(30); sys.exit(0)
    try:
        out["spent"] = preflight.rank_check(me, float(os.environ["CHECK_TIMEOUT"]))
    except preflight.RankCheckError as exc:
        out["error"] = str(exc)
    else:
        dist.init_process_group("gloo")
        dist.barrier()
        out["world"] = dist.get_world_size()
        dist.destroy_process_group()
    with open(os.path.join(sys.argv[1], f"rank-{rank}.json"), "w") as f:
        json.dump(out, f)
    sys.exit(1 if "error" in out else 0)
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def launch(tmp_path):
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()

    def run(timeout=20, nodes="here", node_id="0", head_port=None, extra_env=None):
        env = dict(os.environ, CHECK_TIMEOUT="10")
        env.update(HPCTRAIN_HEAD="127.0.0.1", HPCTRAIN_PORT=str(head_port or port),
                   HPCTRAIN_NODES=nodes, SLURMD_NODENAME="here", SLURM_NODEID=node_id,
                   HPCTRAIN_RUN_DIR=str(tmp_path), PYTHONUNBUFFERED="1",
                   **(extra_env or {}))
        args = [*RANK, "launch", str(timeout), "--nnodes=1", "--nproc-per-node=2",
                "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=t",
                "--max-restarts=0", str(program), str(out)]
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    run.out, run.status, run.port = out, tmp_path / "status", port
    return run


def ranks(out) -> dict[int, dict]:
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in out.glob("rank-*.json")}


def test_check_passes_then_torchrun_binds_the_same_port_and_ranks_meet_in_its_store(launch):
    done = launch()
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"hpctrain preflight: all 1 nodes reached 127.0.0.1:{launch.port} in" in done.stdout
    got = ranks(launch.out)
    assert sorted(got) == [0, 1], got
    for r in got.values():
        # The agent shared its store with the ranks (torch 2.13: its own port, not the
        # rendezvous one): the check met there, where init_process_group met next.
        assert r["agent_store"] == "True" and r["master"] == got[0]["master"], r
        assert r["world"] == 2 and "error" not in r, r
    record = json.loads((launch.status / "preflight.json").read_text())
    assert record["nodes"] == [] and record["message"] == "passed"
    assert not list(launch.status.glob("preflight-failed-*"))


def test_a_node_that_never_arrives_is_named_and_no_torchrun_starts(launch):
    done = launch(timeout=2, nodes="here,ghost")
    assert done.returncode == 1, done.stdout + done.stderr
    said = f"ghost did not reach the head 127.0.0.1:{launch.port} within 2 s (preflight_timeout)"
    assert f"hpctrain preflight: {said}" in done.stdout
    assert (launch.status / "preflight-failed-here.txt").read_text() == said + "\n"
    assert json.loads((launch.status / "preflight.json").read_text())["nodes"] == ["ghost"]
    assert not ranks(launch.out) and "torch.distributed" not in done.stderr, done.stderr


def test_a_taken_rendezvous_port_on_the_head_is_named(launch):
    with socket.socket() as holder:
        holder.bind(("", launch.port))
        holder.listen()
        done = launch(timeout=5)
    assert done.returncode == 1, done.stdout + done.stderr
    assert (f"hpctrain preflight: here: the head cannot listen on the rendezvous port "
            f"{launch.port}") in done.stdout
    assert (launch.status / "preflight-failed-here.txt").exists()
    assert not ranks(launch.out)


def test_a_node_that_cannot_reach_the_head_says_so(launch):
    nobody = free_port()  # nothing listens there: node 1 is refused until its deadline
    done = launch(timeout=1, nodes="head,here", node_id="1", head_port=nobody)
    assert done.returncode == 1, done.stdout + done.stderr
    said = f"here: cannot reach the head 127.0.0.1:{nobody}: "
    assert f"hpctrain preflight: {said}" in done.stdout and "(within 1 s)" in done.stdout
    assert (launch.status / "preflight-failed-here.txt").read_text().startswith(said)
    assert not ranks(launch.out)


def test_a_rank_that_never_meets_is_named_by_the_others(launch):
    done = launch(extra_env={"SKIP": "1", "CHECK_TIMEOUT": "3"})
    assert done.returncode != 0
    got = ranks(launch.out)
    assert list(got) == [0], got
    assert got[0]["error"] == ("rank 1 (here) did not reach the rank check within 3 s "
                               "(launcher.preflight_timeout); 1 of 2 ranks arrived"), got


# One rank of the check in torchrun's store, as a node's torchrun starts it: at the epoch second
# ARRIVE (torch imported before: its import time differs by seconds on a busy machine), the
# check; its verdict (or "met") into OUT/rank-R.json.
ONE_RANK = textwrap.dedent("""
    import json, os, sys, time, types
    from torch.distributed import TCPStore
    from hpctrain.rank.before import preflight
    rank = int(os.environ["RANK"])
    me = types.SimpleNamespace(rank=rank, world_size=4, node=os.environ["NODE"],
                               local_world_size=2)
    time.sleep(max(0.0, float(os.environ["ARRIVE"]) - time.time()))
    try:
        preflight.rank_check(me, 4.0)
        said = "met"
    except preflight.RankCheckError as exc:
        said = str(exc)
    with open(os.path.join(sys.argv[1], f"rank-{rank}.json"), "w") as f:
        json.dump(said, f)
""")


def test_ranks_that_arrive_apart_give_one_verdict_before_the_first_nodes_store_goes(tmp_path):
    """Rank 3 never arrives; rank 2 (the second node) arrives 2.5 s after ranks 0 and 1 (the
    first node, whose torchrun serves the store). As torchrun does, the store goes as soon as
    the first node's ranks have ended. Every rank that arrived names rank 3, none says the
    store was lost: they give up together, and the first node's ranks leave last."""
    import datetime
    import time

    import torch.distributed as dist
    program = tmp_path / "one_rank.py"
    program.write_text(ONE_RANK)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=30))
    common = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port),
                  TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0")
    t0 = time.time() + 20  # (every rank has imported torch by then)
    ranks_ = {r: subprocess.Popen([sys.executable, str(program), str(tmp_path)],
                                  env=dict(common, RANK=str(r), GROUP_RANK=str(r // 2),
                                           NODE=f"n{r // 2 + 1}",
                                           ARRIVE=str(t0 + (2.5 if r == 2 else 0))))
              for r in (0, 1, 2)}
    for r in (0, 1):
        ranks_[r].wait(timeout=60)
    del store  # (the first node's torchrun ends with its ranks, and its store with it)
    ranks_[2].wait(timeout=60)
    verdict = ("rank 3 (n2) did not reach the rank check within 4 s (launcher.preflight_timeout); "
               "3 of 4 ranks arrived")
    said = {r: json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1, 2)}
    assert said == {0: verdict, 1: verdict, 2: verdict}, said
