"""The cause named for a multi-rank failure is the rank that died, not a peer that lost it
(issue 28, item 6): a clean run once named "rank 1 ... connection closed by peer" instead of the
killed rank 3, because the killed rank's record is written after the fact and sorts later."""
from __future__ import annotations

from hpctrain.rank.records import RankFailure, first_failure


def _f(rank, error, time):
    return RankFailure(rank=rank, node=f"node{rank // 2 + 1}", exit_status=1, error=error, time=time)


def test_a_killed_rank_outranks_peers_that_lost_it_whatever_the_times():
    lost = [_f(r, "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer "
               "[10.0.0.2]:4242", f"2026-01-01T00:00:0{r}.000") for r in (0, 1, 2)]
    killed = _f(3, "killed by Signal 9 (SIGKILL)", "2026-01-01T00:00:09.000")
    assert first_failure(lost + [killed]).rank == 3


def test_an_error_of_its_own_outranks_a_lost_connection_and_else_the_earliest_wins():
    own = _f(2, "ValueError: loss is NaN", "2026-01-01T00:00:05.000")
    lost = _f(0, "RuntimeError: Connection reset by peer", "2026-01-01T00:00:01.000")
    assert first_failure([lost, own]).rank == 2
    early = _f(1, "KeyError: 'obs'", "2026-01-01T00:00:02.000")
    assert first_failure([lost, own, early]).rank == 1
    assert first_failure([]) is None
