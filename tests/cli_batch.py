"""Several `hpctrain` command lines in one process, each through `cli.main` as the console
script calls it: the hostile-state tests run eleven commands on each of ~25 damaged run
directories, and a process per command cost more than the commands (~1.3 s a directory).

HPCTRAIN_DEBUG is set, so an exception main did not foresee is a traceback in the answer rather
than main's "failed unexpectedly" line, which reads like any refusal.

stdin: a JSON list of argv lists; stdout: a JSON list of {"rc", "out", "err"}."""
from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback


def _stream() -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace",
                            write_through=True)


def run(argv: list[str]) -> dict:
    from hpctrain.cli import main
    out, err = _stream(), _stream()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse's own refusals
            rc = exc.code if isinstance(exc.code, int) else 2
        except BaseException:  # noqa: BLE001 — what the test must see
            traceback.print_exc()
            rc = 1
    return {"rc": rc, "out": out.buffer.getvalue().decode(), "err": err.buffer.getvalue().decode()}


if __name__ == "__main__":
    os.environ["HPCTRAIN_DEBUG"] = "1"
    answers = [run(argv) for argv in json.load(sys.stdin)]
    json.dump(answers, sys.__stdout__)
