"""Why a pending job waits (backends/slurm/pending.py) and maintenance collisions
(backends/slurm/reservations.py), from Slurm's own text: no process is started."""
from __future__ import annotations

import time

from hpctrain.backends import JobState, State
from hpctrain.backends.slurm import pending, reservations
from hpctrain.follow.display import describe

QUEUE = """\
12|high|4294901758|2031-01-01T10:00:00|Resources
13|high|4294901757|N/A|Priority
15|debug,high|4294901757|2031-01-01T11:30:00|Priority
14|debug|4294901760|N/A|Priority
16_[1-3%1]|high|4294901700|N/A|JobArrayTaskLimit
garbage line
"""


def test_categories_cover_slurm_reasons():
    cases = {"Priority": "queue", "Resources": "resources", "Dependency": "dependency",
             "DependencyNeverSatisfied": "dependency", "JobHeldUser": "held",
             "JobHeldAdmin": "held", "BeginTime": "begin", "None": "starting", None: "starting",
             "QOSMaxGRESPerUser": "limit", "AssocGrpCpuLimit": "limit",
             "ReqNodeNotAvail, Reserved for maintenance": "reservation", "Reservation": "reservation",
             "PartitionTimeLimit": "job", "ReqNodeNotAvail, UnavailableNodes:node3": "nodes",
             "SomethingNew": "other"}
    for reason, cat in cases.items():
        assert pending.category(reason) == cat, reason


def test_queue_counts_jobs_ahead_in_the_partition_and_reads_the_estimate():
    queue = pending.parse_start(QUEUE)
    assert [q["job"] for q in queue] == ["12", "13", "15", "14", "16_[1-3%1]"]
    n, start = pending.ahead("15", queue)
    # 12 (higher priority), 13 (same priority, older) in high, 14 in debug (15 may run there
    # too); not 16 (lower priority)
    assert n == 3
    assert start == time.mktime(time.strptime("2031-01-01T11:30:00", "%Y-%m-%dT%H:%M:%S"))
    assert pending.ahead("13", queue) == (1, None)  # N/A: no estimate
    assert pending.ahead("14", queue) == (0, None)
    assert pending.ahead("16_2", queue)[0] == 3  # an array task by its array's id: 12, 13, 15
    assert pending.ahead("99", queue) == (None, None)


def test_sentences_name_the_action():
    why = {"category": "queue", "reason": "Priority", "partition": "high", "ahead": 2,
           "estimate": "2031-01-01 11:30"}
    text, action = pending.sentence(why, "15")
    assert text == ("behind 2 higher-priority jobs in partition high; Slurm estimates it starts "
                    "2031-01-01 11:30")
    assert "backfill" in action
    text, action = pending.sentence({"category": "held", "reason": "JobHeldUser"}, "15")
    assert text == "held by you" and action == "release it: `scontrol release 15`"
    text, action = pending.sentence({"category": "held", "reason": "JobHeldAdmin"}, "15")
    assert "administrator" in text and "operator" in action
    text, _ = pending.sentence({"category": "other", "reason": "SomethingNew"}, "15")
    assert text == "SomethingNew"  # unknown reasons are shown raw
    lim = {"category": "limit", "reason": "QOSMaxGRESPerUser",
           "limit": {"field": "MaxTRESPU", "limits": "resources per user", "value": "gres/gpu=8"}}
    text, _ = pending.sentence(lim, "15")
    assert text == ("held by a QoS limit: QOSMaxGRESPerUser (resources per user, "
                    "MaxTRESPU=gres/gpu=8)")
    lim["limit"] = {"field": "MaxTRESPU", "limits": "resources per user", "value": None,
                    "unknown": "sacctmgr cannot tell here (accounting storage is disabled)"}
    assert "its value: sacctmgr cannot tell here" in pending.sentence(lim, "15")[0]


def test_limit_fields_and_sacctmgr_value():
    assert pending.limit_of("QOSMaxGRESPerUser") == ("MaxTRESPU", "resources per user")
    assert pending.limit_of("QOSMaxJobsPerUserLimit")[0] == "MaxJobsPU"
    assert pending.limit_of("AssocGrpGRES")[0] == "GrpTRES"
    assert pending.limit_of("QOSMaxWallDurationPerJobLimit")[0] == "MaxWall"
    assert pending.parse_sacctmgr("normal|gres/gpu=8\n", "MaxTRESPU") == "gres/gpu=8"
    assert pending.parse_sacctmgr("normal|\n", "MaxTRESPU") == "(no limit set)"


def test_untrusted_text_is_bounded_and_printable():
    assert pending.clean("a\x1b[31mb\nc" + "x" * 500) .startswith("a?[31mb?c")
    assert len(pending.clean("x" * 500)) == 200
    assert pending.parse_start("1;rm|debug|1|N/A|x\n") == []


def test_describe_shows_the_category_and_a_raw_reason_without_one():
    why = {"category": "held", "reason": "JobHeldUser", "text": "held by you", "action": "a"}
    assert describe(JobState(State.PENDING, reason="JobHeldUser", why=why)) == "PENDING: held by you"
    assert describe(JobState(State.PENDING, reason="Weird")) == "PENDING (Weird)"


RES = """\
ReservationName=maint1 StartTime=2031-01-01T12:00:00 EndTime=2031-01-01T14:00:00 Duration=02:00:00 Nodes=node[1-4] NodeCnt=4 CoreCnt=8 Features=(null) PartitionName=(null) Flags=MAINT,SPEC_NODES TRES=cpu=8 Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)
ReservationName=daily StartTime=2031-01-01T11:00:00 EndTime=2031-01-02T10:30:00 Duration=23:30:00 Nodes=node[1-2] NodeCnt=2 CoreCnt=4 Features=(null) PartitionName=(null) Flags=MAINT,DAILY,SPEC_NODES TRES=cpu=4 Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)
ReservationName=team StartTime=2031-01-01T10:30:00 EndTime=2031-01-01T11:00:00 Duration=00:30:00 Nodes=node3 NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=(null) Flags=SPEC_NODES TRES=cpu=2 Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)
"""


def _t(text):
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def test_reservations_parse():
    res = reservations.parse(RES + "No reservations in the system\n")
    assert [r.name for r in res] == ["maint1", "daily", "team"]
    assert res[0].maint and res[0].nodes == {"node1", "node2", "node3", "node4"}
    assert res[1].period == 86400 and not res[2].maint
    assert res[0].start == _t("2031-01-01T12:00:00")


def test_collision_warns_with_the_time_that_fits_and_refuses_the_impossible():
    maint1, daily, team = reservations.parse(RES)
    nodes = {f"node{i}" for i in range(1, 5)}
    now = _t("2031-01-01T10:00:00")
    # ends before it: no collision
    assert reservations.collision([maint1], nodes, 4, 3600, now) is None
    c = reservations.collision([maint1], nodes, 4, 3 * 3600, now)
    assert not c.never and c.fits == 2 * 3600 and "02:00:00 or less fits" in c.text
    assert "maint1" in c.text
    # enough nodes outside it: no collision (daily holds node1-2 only)
    assert reservations.collision([daily], nodes, 2, 3 * 3600, now) is None
    # a daily maintenance with 30-minute gaps: a 2 h job on its nodes can never start
    assert reservations.collision([daily], nodes, 3, 3600, now) is None  # fits before it
    c = reservations.collision([daily], nodes, 3, 2 * 3600, now)
    assert c.never and "never start" in c.text and "00:30:00" in c.text
    # not maintenance: no collision
    assert reservations.collision([team], nodes, 4, 3 * 3600, now) is None
