"""A trial of a function study (`hpctrain.submit_function(fn, job)` with a `search:` section):
the program every rank of the trial runs, under the bootstrap like any job's script.

    python .../hpctrain/search/call.py KEY=VALUE ...

It loads the function and its arguments that submit_function pickled into the study's
`study/function.pkl` (with cloudpickle, as submitit does: so notebook cells work) and calls
fn(*args, **kwargs, KEY=VALUE, ...): the job's `args` are the function's keyword arguments, and
the study's parameters name them as they name a Hydra override (`search.params.lr` with
`args: [lr=0.001]`). The function reports its metric as any trial's program does
(`import hpctrain_progress; hpctrain_progress.report(step, reward=...)`).

Only the nodes of the study's own allocations unpickle the file, to run the user's own
function (submitit's model: its job pickles travel the same way); nothing that reads a study
to show it (status, list, report, doctor) opens it.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

FUNCTION = "study/function.pkl"
MAX_BYTES = 256 << 20


def keyword_values(argv: list[str]) -> dict:
    """The trial's KEY=VALUE arguments (a Hydra-style `+` or `--` before KEY is dropped) as
    keyword arguments: a value that reads as JSON (numbers, true/false, null, lists) is that
    value, any other is the string."""
    out = {}
    for arg in argv:
        key, sep, text = arg.partition("=")
        key = key.lstrip("+-")
        if not sep or not key.isidentifier():
            raise SystemExit(f"hpctrain: a function trial takes KEY=VALUE arguments (the job's "
                             f"args), not {arg!r}")
        try:
            out[key] = json.loads(text)
        except ValueError:
            out[key] = text
    return out


def study_dir(trial_dir: str) -> Path:
    """trials/<n>/ -> the study's run directory."""
    return Path(trial_dir).resolve().parent.parent


def load(run_dir: Path):
    """(fn, args, kwargs) from the study's function file: a regular file, no link, bounded."""
    import pickle
    path = run_dir / FUNCTION
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        import stat
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
            raise SystemExit(f"hpctrain: {path} is not a regular file of at most {MAX_BYTES} bytes")
        return pickle.loads(f.read())  # noqa: S301 - the user's own function (see above)


def main(argv: list[str]) -> object:
    fn, args, kwargs = load(study_dir(os.environ["HPCTRAIN_RUN_DIR"]))
    return fn(*args, **{**kwargs, **keyword_values(argv)})


if __name__ == "__main__":
    main(sys.argv[1:])
