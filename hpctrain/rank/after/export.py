"""`python RANK export RUN_DIR LIBRARY CHECKPOINT NAME [SAMPLES]`: a checkpoint's policy as
ONNX and TorchScript in RUN_DIR/exports/NAME/, checked, under the run's own interpreter.

1. the policy is rebuilt from the checkpoint and the saved config (policies.py, sources.py);
2. it is exported in a private temporary folder (torch writes by path), then both files are
   read back and checked: SAMPLES sampled observations (seeded; normal, scaled by 1 and by 5,
   and zeros) go through the library's own model, the TorchScript file (torch.jit.load) and the
   ONNX file (onnxruntime, one observation at a time: the ONNX form has a batch of one, as
   rsl-rl's and Isaac Lab's exports do); every action must match within TOLERANCE (relative to
   the action's size, absolute below 1). A mismatch, a NaN or a shape that differs is an error;
3. only then are the files, and export.json (sizes, sha256, the check's maximum differences),
   written into a hidden folder of RUN_DIR/exports/ with no link followed, and that folder is
   renamed to NAME, replacing an earlier export of the same checkpoint: nothing that looks like
   an export is ever left by a failed one.

The last line on stdout is `hpctrain-export: {json}`, the record or {"error", "fix"}; the exit
status is 0, or 2 for a refusal. The same command serves a job derived from the run on a node.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path

from ..records import now, open_dir
from .sources import ExportError, find_config, first_line, load_checkpoint

MARK = "hpctrain-export: "
TOLERANCE = 1e-4  # |exported - policy| / max(1, |policy|): float32 kernels differ by ~1e-6
SAMPLES = 64
SEED = 20261129
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
FILES = ("policy.onnx", "policy.pt")
REFUSED = {
    "skrl_jax": ("skrl's JAX checkpoints hold Flax parameters, and no exporter of theirs to "
                 "ONNX or TorchScript is part of skrl or hpctrain",
                 "export from JAX yourself (jax2tf, then tf2onnx), or train the policy with "
                 "skrl's PyTorch side (library: skrl), which hpctrain exports"),
    "command": ("a plain program's policy is its own code: hpctrain cannot know its "
                "architecture or which output is the action",
                "export it from your program (torch.onnx.export, torch.jit.script) into "
                "$HPCTRAIN_RUN_DIR/exports/"),
    "di_engine": ("DI-engine's policies are built from its config by its own code: hpctrain has "
                  "no exporter for them", "export it with DI-engine's own tools"),
}


def main(args: list[str]) -> int:
    try:
        if len(args) not in (4, 5) or (len(args) == 5 and not args[4].isdigit()):
            raise ExportError("usage: export RUN_DIR LIBRARY CHECKPOINT NAME [SAMPLES]",
                              "hpctrain export RUN starts this")
        samples = int(args[4]) if len(args) == 5 else SAMPLES
        record = export(args[0], args[1], args[2], args[3], max(1, min(samples, 4096)))
    except ExportError as exc:
        print(MARK + json.dumps({"error": exc.what, "fix": exc.fix}), flush=True)
        return 2
    print(MARK + json.dumps(record), flush=True)
    return 0


def export(run_dir: str, library: str, checkpoint: str, name: str, samples: int) -> dict:
    from .policies import BUILDERS
    if library in REFUSED:
        raise ExportError(*REFUSED[library])
    if library not in BUILDERS:
        raise ExportError(f"no exporter for library '{library[:40]}'",
                          f"export handles {', '.join(BUILDERS)}")
    if not NAME.fullmatch(name):
        raise ExportError(f"export name {name[:60]!r} is not a plain file name", "use letters, "
                          "digits, '.', '_' and '-'")
    rel = os.path.normpath(checkpoint)
    if os.path.isabs(rel) or rel.split(os.sep)[0] == os.pardir:
        raise ExportError(f"{checkpoint[:200]}: not inside the run directory",
                          "name a checkpoint of the run")
    ckpt = load_checkpoint(run_dir, rel)
    where, cfg = find_config(run_dir, rel)
    policy = BUILDERS[library](ckpt, cfg, where)
    files = _export(policy)
    check = _check(policy, files, samples)
    record = {
        "format": 1, "library": library, "checkpoint": rel, "config": where,
        "checkpoint_sha256": _sha256_file(run_dir, rel), "policy": policy.what,
        "observations": policy.obs_dim, "actions": policy.action_dim,
        "files": [{"name": n, "bytes": len(files[n]), "sha256": hashlib.sha256(files[n]).hexdigest()}
                  for n in FILES],
        "check": check, "versions": _versions(), "created": now(),
    }
    _install(run_dir, name, files, record)
    return {**record, "folder": os.path.join("exports", name)}


def _export(policy) -> dict[str, bytes]:
    """The TorchScript and ONNX files' bytes, made in a private temporary folder."""
    import tempfile

    import torch
    with tempfile.TemporaryDirectory(prefix="hpctrain-export-") as tmp:
        module = policy.module.cpu().eval()
        try:
            jit = torch.jit.script(module) if policy.script else \
                torch.jit.trace(module, (torch.zeros(1, policy.obs_dim),))
            jit.save(os.path.join(tmp, "policy.pt"))
        except Exception as exc:
            raise ExportError(f"TorchScript export failed: {first_line(exc)}",
                              "report it with the run's library version") from None
        onnx_module, inputs, in_names, out_names = policy.onnx_form()
        try:
            import onnxscript  # noqa: F401  (torch.onnx.export's exporter needs it)
        except ImportError:
            raise ExportError("torch.onnx.export needs onnx and onnxscript, which the run's "
                              "environment lacks", "install them in the run's environment: "
                              "pip install onnx onnxscript onnxruntime") from None
        try:  # torch.export's exporter; one file to deploy (no external data)
            torch.onnx.export(onnx_module.cpu().eval(), inputs, os.path.join(tmp, "policy.onnx"),
                              export_params=True, opset_version=18, input_names=in_names,
                              output_names=out_names, external_data=False)
        except Exception as exc:
            raise ExportError(f"ONNX export failed: {first_line(exc)}",
                              "report it with the run's torch and library versions") from None
        return {n: Path(tmp, n).read_bytes() for n in FILES}


def observations(obs_dim: int, samples: int):
    """Seeded observations: normal at scales 1 and 5 (a normaliser's far tails too), and zeros."""
    import torch
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(samples, obs_dim, generator=g)
    x[samples // 2:] *= 5.0
    x[-1] = 0.0
    return x


def _check(policy, files: dict[str, bytes], samples: int) -> dict:
    import io

    import numpy as np
    import torch
    try:
        import onnxruntime
    except ImportError:
        raise ExportError("onnxruntime is not installed in the run's environment: the ONNX file "
                          "cannot be checked", "install it there: pip install onnxruntime") from None
    obs = observations(policy.obs_dim, samples)
    with torch.no_grad():
        want = policy.reference(obs).detach().cpu().float().numpy()
        jit = torch.jit.load(io.BytesIO(files["policy.pt"]), map_location="cpu")
        got = {"torchscript": jit(obs).detach().cpu().float().numpy()}
    session = onnxruntime.InferenceSession(files["policy.onnx"], providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0].name
    got["onnx"] = np.concatenate([session.run(None, {feed: row[None].numpy()})[0] for row in obs])
    if want.shape != (samples, policy.action_dim) or not np.isfinite(want).all():
        raise ExportError(f"the checkpoint's policy gives actions of shape {want.shape} with "
                          f"{int((~np.isfinite(want)).sum())} not finite", "export a checkpoint "
                          "of a policy that trained without NaNs")
    diffs = {}
    for form, actions in got.items():
        if actions.shape != want.shape:
            raise ExportError(f"the {form} policy gives actions of shape {actions.shape}, the "
                              f"checkpoint's {want.shape}", "report it with the run's versions")
        diff = np.abs(actions.astype(np.float64) - want) / np.maximum(1.0, np.abs(want))
        worst = float(np.nanmax(np.where(np.isfinite(diff), diff, np.inf)))
        if not worst <= TOLERANCE:
            raise ExportError(f"the exported {form} policy's actions differ from the checkpoint's "
                              f"policy by {worst:.3g} on {samples} sampled observations (tolerance "
                              f"{TOLERANCE:g}): nothing was written", "report it with the run's "
                              "library, torch and onnxruntime versions")
        diffs[form] = worst
    return {"samples": samples, "seed": SEED, "tolerance": TOLERANCE, "max_diff": diffs,
            "measure": "max |exported - policy| / max(1, |policy|) over every action"}


def _install(run_dir: str, name: str, files: dict[str, bytes], record: dict) -> None:
    """exports/NAME/ made whole under a hidden name, then renamed into place (see the top)."""
    fd = open_dir(run_dir, ["exports"])
    tag = f"{os.getpid()}.{os.urandom(4).hex()}"
    tmp, old = f".{name}.{tag}.partial", f".{name}.{tag}.old"
    try:
        os.mkdir(tmp, 0o755, dir_fd=fd)
        tfd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        try:
            text = json.dumps(record, indent=2, sort_keys=True).encode() + b"\n"
            for fname, data in [*files.items(), ("export.json", text)]:
                ffd = os.open(fname, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                              | os.O_CLOEXEC, 0o644, dir_fd=tfd)
                with os.fdopen(ffd, "wb") as f:
                    f.write(data)
        finally:
            os.close(tfd)
        try:
            os.rename(name, old, src_dir_fd=fd, dst_dir_fd=fd)  # a link is renamed, not followed
        except FileNotFoundError:
            old = ""
        os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        if old:
            _remove_flat(fd, old)
    except BaseException:
        _remove_flat(fd, tmp)
        raise
    finally:
        os.close(fd)


def _remove_flat(fd: int, name: str) -> None:
    """Remove folder `name` of dir fd and its files; a link is removed itself, never followed."""
    try:
        sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    except FileNotFoundError:
        return
    except OSError:
        os.unlink(name, dir_fd=fd)  # a link or a file where a folder was
        return
    try:
        for entry in os.listdir(sub):
            try:
                os.unlink(entry, dir_fd=sub)
            except IsADirectoryError:
                pass  # not hpctrain's: left, and the rmdir below then leaves the folder
    finally:
        os.close(sub)
    try:
        os.rmdir(name, dir_fd=fd)
    except OSError:
        pass


def _sha256_file(run_dir: str, rel: str) -> str:
    from .sources import MAX_CHECKPOINT, read_under
    return hashlib.sha256(read_under(run_dir, rel, MAX_CHECKPOINT)).hexdigest()


def _versions() -> dict:
    from importlib import metadata
    out = {"python": sys.version.split()[0]}
    for dist in ("torch", "onnx", "onnxruntime", "rsl-rl-lib", "rl-games", "skrl", "isaaclab"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out




if __name__ == "__main__":  # a job derived from the run: `-m _hpctrain_rank.after.export ARGS`
    sys.exit(main(sys.argv[1:]))
