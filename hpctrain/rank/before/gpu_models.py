"""Which NVIDIA GPU models can render: the one table hpctrain decides video by.

Isaac Sim renders (cameras, `--video`) with RTX ray tracing, which needs RT cores. The data-centre
compute GPUs have none (A100, A30, H100, H200, B200, V100 ...): `--video` fails there (IsaacLab
#3421, #5171). The graphics and inference GPUs have them (L40S, L40, L4, A40, A10, A10G, T4, and
every RTX-branded card: RTX A6000, RTX 6000 Ada, GeForce RTX 4090 ...).

A GPU is named as nvidia-smi prints it ("NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-32GB",
"NVIDIA RTX A6000") or as a Slurm GRES type says it ("h100", "l40s", "rtx_a6000",
"nvidia_a100-sxm4-80gb" from AutoDetect=nvml). Both are read the same way: lower case, split at
anything not a letter or digit, the vendor words dropped; then each word and each two neighbouring
words joined ("rtx a6000" -> "rtxa6000") are looked up. A name the table does not know, or one
that matches models of both kinds, is "unknown: cannot tell": never a guess that it renders.

Standard library only: the rank side, `site detect`, the job checks and scripts/gpu-check.sh
(`python -m hpctrain.rank.before.gpu_models NAME...`) all read this one table.
"""
from __future__ import annotations

import re
import sys
from typing import NamedTuple

# model key -> (what it is, whether it has RT cores)
MODELS: dict[str, tuple[str, bool]] = {
    # compute GPUs: no RT cores, no RTX rendering
    "k80": ("K80", False), "p100": ("P100", False), "v100": ("V100", False),
    "v100s": ("V100S", False), "a30": ("A30", False), "a100": ("A100", False),
    "a800": ("A800", False), "h20": ("H20", False), "h100": ("H100", False),
    "h800": ("H800", False), "h200": ("H200", False), "gh200": ("GH200", False),
    "b100": ("B100", False), "b200": ("B200", False), "b300": ("B300", False),
    "gb200": ("GB200", False), "gb300": ("GB300", False),
    "gtx": ("GeForce GTX", False),
    # graphics and inference GPUs: RT cores
    "t4": ("T4", True), "a2": ("A2", True), "a10": ("A10", True), "a10g": ("A10G", True),
    "a16": ("A16", True), "a40": ("A40", True), "l4": ("L4", True), "l20": ("L20", True),
    "l40": ("L40", True), "l40g": ("L40G", True), "l40s": ("L40S", True),
    "a2000": ("RTX A2000", True), "a4000": ("RTX A4000", True), "a4500": ("RTX A4500", True),
    "a5000": ("RTX A5000", True), "a5500": ("RTX A5500", True), "a6000": ("RTX A6000", True),
}
# Every RTX-branded GPU (GeForce RTX, Quadro RTX, RTX Axxxx, RTX Ada, RTX PRO) has RT cores.
RTX = re.compile(r"rtx[a-z0-9]*")
_VENDOR = {"nvidia", "tesla", "geforce", "quadro"}
_WORD = re.compile(r"[a-z0-9]+")
MAX_NAME = 200  # a name is at most this long (nvidia-smi's are under 64 characters)


class Verdict(NamedTuple):
    name: str  # as given (cut to MAX_NAME)
    model: str | None  # the table's model, None when unknown
    renders: bool | None  # None: cannot tell

    def text(self) -> str:
        if self.renders is None:
            return f"{self.name}: unknown: cannot tell whether it renders"
        return (f"{self.name}: {self.model} renders (RT cores)" if self.renders else
                f"{self.name}: {self.model} cannot render (no RT cores)")


def keys(name: str) -> list[str]:
    """The words of a GPU name the table is looked up by (module docstring)."""
    words = [w for w in _WORD.findall(name[:MAX_NAME].lower()) if w not in _VENDOR]
    return words + [a + b for a, b in zip(words, words[1:])]


def verdict(name: str) -> Verdict:
    """Whether the GPU `name` (nvidia-smi's or a GRES type) can render."""
    found: dict[bool, str] = {}
    words = keys(name)
    for key in words:
        if key in MODELS:
            model, renders = MODELS[key]
            found.setdefault(renders, model)
    if any(RTX.fullmatch(key) for key in words):
        found.setdefault(True, "RTX")  # the table's model when it names one (RTX A6000)
    shown = name[:MAX_NAME]
    if len(found) != 1:  # none known, or models of both kinds in one name
        return Verdict(shown, None, None)
    (renders, model), = found.items()
    return Verdict(shown, model, renders)


def verdicts(names) -> tuple[bool | None, list[Verdict]]:
    """Whether every GPU named renders (None: some cannot be told, none is known not to; False
    also when no name is given), and each one's verdict (each name once)."""
    each = [verdict(n) for n in dict.fromkeys(names)]
    if not each or any(v.renders is False for v in each):
        return False, each
    return (None if any(v.renders is None for v in each) else True), each


# What nvidia-smi is asked, here or on an ssh host: "index, name" a line.
SMI_QUERY = ["--query-gpu=index,name", "--format=csv,noheader"]
MAX_GPUS = 64  # lines read of its answer; a node has at most 16 GPUs today
_ROW = re.compile(r"([0-9]{1,3}), (.+)")


def smi_names(text: str, visible: set[int] | None = None) -> list[str]:
    """nvidia-smi's answer to SMI_QUERY (untrusted: a tool's output) -> the GPU names, of the
    GPUs in `visible` (indexes) when given: at most MAX_GPUS lines, each name made printable and
    cut to MAX_NAME; a line of another shape is left out."""
    from ..printable import clean
    out = []
    for line in text.splitlines()[:MAX_GPUS]:
        m = _ROW.fullmatch(line.strip())
        name = clean(m.group(2), MAX_NAME) if m else None
        if name and (visible is None or int(m.group(1)) in visible):
            out.append(name)
    return out


def visible_indexes(value: str | None) -> set[int] | None:
    """CUDA_VISIBLE_DEVICES as the GPU indexes a job here is given; None: every GPU (unset, or
    given by UUID or MIG id, which nvidia-smi's index does not name)."""
    if value is None:
        return None
    ids = [v.strip() for v in value.split(",")]
    out = set()
    for v in ids:  # CUDA stops at the first invalid entry ("-1" hides every GPU)
        if not (v.isascii() and v.isdigit()):
            return out if v.startswith("-") else None
        out.add(int(v))
    return out


def local_names(path: str | None = None, timeout: float = 30,
                visible: str | None = None) -> tuple[list[str], str]:
    """This machine's GPU names from nvidia-smi (those CUDA_VISIBLE_DEVICES, `visible`, leaves a
    job), and how they were learned (or why not)."""
    import shutil
    import subprocess
    from .. import tools
    from ..printable import clean
    smi = shutil.which("nvidia-smi", path=path)
    if smi is None:
        return [], "no nvidia-smi on PATH"
    try:  # bounded: an nvidia-smi that prints without end is stopped at the cap
        out = tools.run([smi, *SMI_QUERY], timeout=timeout, limit=1 << 16)
    except (OSError, subprocess.SubprocessError) as exc:
        return [], f"nvidia-smi failed: {clean(exc, 200)}"
    text = out.stdout.decode("utf-8", "replace")
    if out.returncode != 0:
        said = clean(" ".join((text + out.stderr.decode("utf-8", "replace")).split()), 200)
        return [], f"nvidia-smi failed (exit {out.returncode}): {said or 'no output'}"
    shown = visible_indexes(visible)
    names = smi_names(text, shown)
    said = f"nvidia-smi lists {len(names)} GPU(s)" if names else "nvidia-smi lists no GPU"
    return names, said + (f" of CUDA_VISIBLE_DEVICES={visible}" if shown is not None else "")


if __name__ == "__main__":  # scripts/gpu-check.sh: one line per name, then the whole verdict
    ok, each = verdicts(sys.argv[1:])
    for v in each:
        print(v.text())
    print({True: "renders", False: "cannot render", None: "unknown"}[ok])
