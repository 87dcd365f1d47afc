"""A job with `video:` runs only on GPUs that can render: refused at validate and submit, before
anything is queued, when it would land on GPUs that cannot (or that hpctrain cannot tell).

Isaac Sim renders with RTX ray tracing: on GPUs without RT cores (A100, H100, H200, B200 ...)
`--video` fails, after the job waited in the queue and started its simulation (IsaacLab #3421,
#5171). The GPU models come from the job's scheduler (Backend.job_gpus): a Slurm partition's
from the site profile (gpu_type, gpu_models, which `site detect` writes from sinfo), this
machine's and each ssh host's from nvidia-smi. Whether a model renders is the one table's
(rank/before/gpu_models.py); a model it does not know is refused as "cannot tell", never guessed.
"""
from __future__ import annotations

from ..backends import backend_class
from ..errors import HpctrainError
from ..rank.before.gpu_models import verdicts


def check(job) -> str | None:
    """Raise HpctrainError when the job, or a task of its sweep, asks for video: and its GPUs
    cannot render (or cannot be told to); else what the job records and where it renders (None:
    no video). A sweep's tasks are asked once per partition."""
    asked, said = set(), []
    for one in [job, *(task.job for task in job.tasks)]:
        key = (one.spec.resources.partition, one.spec.video is not None)
        if key not in asked:
            asked.add(key)
            said.append(_check(one))
    return next((s for s in said if s), None)


def _check(job) -> str | None:
    spec = job.spec
    if spec.video is None:
        return None
    where = job.origins(("video",)) if job.origins is not None else job.source
    if not spec.resources.gpus_per_node:
        raise HpctrainError("the job asks for video: but for no GPU: clips are rendered on a "
                            "GPU with RT cores", where,
                            "ask for one (resources.gpus_per_node: 1), or remove video:")
    gpus = backend_class(job.site.scheduler).job_gpus(job)
    renders, each = verdicts(gpus.names)
    if renders is True:
        v = spec.video
        clips = (f"{v.count} clips of {v.length} steps, every {v.interval}" if v.count > 1
                 else f"1 clip of {v.length} steps")
        return f"{clips}; {gpus.place}: " + "; ".join(x.text() for x in each)
    if not each:
        raise HpctrainError(f"the job asks for video:, and hpctrain cannot tell whether the GPUs "
                            f"of {gpus.place} can render: {gpus.source}", where, gpus.fix)
    said = "; ".join(v.text() for v in each if v.renders is not True)
    if renders is False:
        raise HpctrainError(f"the job asks for video:, and the GPUs of {gpus.place} cannot "
                            f"render: {said} ({gpus.source})", where, f"{gpus.fix}; or remove video:")
    raise HpctrainError(f"the job asks for video:, and hpctrain cannot tell whether the GPUs of "
                        f"{gpus.place} can render: {said} ({gpus.source})", where, gpus.fix)
