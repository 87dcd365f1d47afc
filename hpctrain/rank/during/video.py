"""The job's `video: count` held on the rank: no clip starts after the count-th.

Isaac Lab records a clip every `--video_interval` steps for as long as the training runs, and each
clip's frames wait in host memory until it is written (IsaacLab #5288, #1996); neither its 3.0
recorder nor gymnasium's RecordVideo (2.x) has a ceiling on the number of clips. The job's ceiling
comes in $HPCTRAIN_VIDEO_COUNT (libraries/base.py sets it with video:); each recorder's trigger
answers "start a clip" at most that many times. Armed as the train hook "video"
(train_hooks.HOOKS), after its module is imported; a release whose recorder no longer has the
trigger gets the warning of hooks._call_hook and records as it would.
"""
from __future__ import annotations

import functools
import os

_MARK = "_hpctrain_video_cap"


def ceiling() -> int | None:
    text = os.environ.get("HPCTRAIN_VIDEO_COUNT", "")
    return int(text) if text.isascii() and text.isdigit() and int(text) > 0 else None


def counted(trigger, most: int):
    """trigger, answering True at most `most` times."""
    started = [0]

    @functools.wraps(trigger)
    def capped(*args, **kwargs):
        if started[0] >= most or not trigger(*args, **kwargs):
            return False
        started[0] += 1
        return True
    return capped


def hook_isaaclab_recorder(module) -> None:
    """Isaac Lab 3.0's VideoRecorder: step() starts a clip when _check_trigger says so."""
    cls = module.VideoRecorder
    original = cls.__init__
    if getattr(original, _MARK, False) or not callable(getattr(cls, "_check_trigger", None)):
        raise AttributeError("VideoRecorder has no _check_trigger to cap")

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        most = ceiling()
        if most is not None:
            self._check_trigger = counted(self._check_trigger, most)
    setattr(__init__, _MARK, True)
    cls.__init__ = __init__


def hook_gymnasium_record_video(module) -> None:
    """gymnasium's RecordVideo (Isaac Lab 2.x wraps the task in it): its step_trigger or
    episode_trigger starts each clip."""
    cls = module.RecordVideo
    original = cls.__init__
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        most = ceiling()
        for name in ("step_trigger", "episode_trigger"):
            trigger = getattr(self, name, None)
            if most is not None and callable(trigger):
                setattr(self, name, counted(trigger, most))
    setattr(__init__, _MARK, True)
    cls.__init__ = __init__
