"""`hpctrain pull` of a 1 GiB run against plain rsync over the same ssh connection (issue 52:
pull moves a 1 GB run at >= 0.9x plain rsync).

The "cluster" is this machine's own sshd, started here on a free port with keys of this bench's
own (nothing of ~/.ssh is used or changed). One real run on the local site leaves 1 GiB of
exported policies (8 files: a run's checkpoints, exports and videos are many files) and its
small files; its run.json then names the sshd as its login node, as a
run submitted from a laptop does, so `hpctrain pull` lists it, checks it and copies it over ssh.
Plain rsync copies the same run directory with the same ssh command line and the same shared
connection (ControlMaster). Each repetition runs both into fresh folders, alternating which goes
first (the source stays in the page cache after the first read).

    python bench/pull.py [--mb 1024] [--reps 3]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpctrain.backends.ssh import openssh  # noqa: E402
from hpctrain.runs.records import Run  # noqa: E402
from hpctrain.schema.spec import SshOptions  # noqa: E402

HPCTRAIN = [sys.executable, "-m", "hpctrain"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sshd(tmp: Path) -> tuple[subprocess.Popen, int, Path, Path]:
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / name)],
                       check=True)
    (tmp / "authorized").write_text((tmp / "client.pub").read_text())
    port = free_port()
    config = tmp / "sshd_config"
    config.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp / 'host'}\n"
                      f"AuthorizedKeysFile {tmp / 'authorized'}\nPidFile {tmp / 'sshd.pid'}\n"
                      "UsePAM no\nStrictModes no\nPasswordAuthentication no\n"
                      "PermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\n")
    sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
                            stderr=open(tmp / "sshd.log", "w"))
    known = tmp / "known_hosts"
    key = (tmp / "host.pub").read_text().split()
    known.write_text(f"[127.0.0.1]:{port} {key[0]} {key[1]}\n")
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    return sshd, port, tmp / "client", known


def make_run(tmp: Path, mb: int, files: int, env: dict) -> Path:
    outside = tmp / "outside"
    outside.mkdir()
    job = tmp / "job.yaml"
    job.write_text(yaml.safe_dump({
        "name": "bench-pull", "library": "command", "python": sys.executable,
        "script": str(ROOT / "tests" / "programs" / "artifacts.py"),
        "args": ["--export-mb", str(mb), "--export-files", str(files), "--outside", str(outside)],
        "resources": {"nodes": 1, "procs_per_node": 1}}))
    out = subprocess.run([*HPCTRAIN, "submit", str(job), "--site", "local", "--wait"], cwd=ROOT,
                         env=env, capture_output=True, text=True, check=True).stdout
    return Path(out.split("run directory: ", 1)[1].split()[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=1024, help="the exported policy's size (MiB)")
    parser.add_argument("--files", type=int, default=8, help="in this many exported files")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-pull-"))
    env = dict(os.environ, HPCTRAIN_HOME=str(tmp / "home"), HPCTRAIN_RUNS_DIR=str(tmp / "runs"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as an install has it: hpctrain's bytecode kept
    sshd, port, key, known = start_sshd(tmp)
    try:
        run_dir = make_run(tmp, args.mb, args.files, env)
        opts = SshOptions(port=port, identity=str(key), known_hosts=str(known))
        far = {"login": "127.0.0.1", "ssh": openssh.ssh_words(opts), "connect_timeout": 10,
               "path": str(run_dir)}
        run = Run(run_dir)
        run.update(extra=dict(run.record.extra, remote=far))
        ssh = openssh.Ssh(far["ssh"], 10)
        shell = openssh.rsync_shell([*ssh.words, *ssh.sharing])
        subprocess.run(ssh.command("127.0.0.1", ["true"]), check=True)  # the shared connection
        size = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file() and not p.is_symlink())
        times: dict[str, list[float]] = {"rsync": [], "pull": []}
        for rep in range(args.reps):
            order = ["rsync", "pull"] if rep % 2 == 0 else ["pull", "rsync"]
            for what in order:
                dest = tmp / f"{what}-{rep}"
                command = (["rsync", "-a", "-e", shell, f"127.0.0.1:{run_dir}/", f"{dest}/"]
                           if what == "rsync" else
                           [*HPCTRAIN, "pull", run_dir.name, "--to", str(dest), "--max-size", "100G"])
                subprocess.run(["sync"], check=True)
                t0 = time.perf_counter()
                subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True)
                times[what].append(time.perf_counter() - t0)
                shutil.rmtree(dest)
        # What pull costs beyond the copy: its fixed part (a pull of the small files alone: the
        # start, the listing over ssh, rsync's own start) and the manifest's hashing of 1 GiB.
        fixed = []
        for rep in range(args.reps):
            t0 = time.perf_counter()
            subprocess.run([*HPCTRAIN, "pull", run_dir.name, "--to", str(tmp / "small"),
                            "--only", "logs"], cwd=ROOT, env=env, check=True, capture_output=True)
            fixed.append(time.perf_counter() - t0)
            shutil.rmtree(tmp / "small")
        t0 = time.perf_counter()
        for f in sorted((run_dir / "exports").iterdir()):
            if f.is_file() and not f.is_symlink():
                with open(f, "rb") as reader:
                    hashlib.file_digest(reader, "sha256")
        hashing = time.perf_counter() - t0
        r, p = statistics.median(times["rsync"]), statistics.median(times["pull"])
        print(f"run of {size / (1 << 20):.0f} MiB over ssh to 127.0.0.1:{port}, {args.reps} reps")
        print(f"plain rsync -a: {' '.join(f'{t:.2f}' for t in times['rsync'])} s (median {r:.2f} s)")
        print(f"hpctrain pull:  {' '.join(f'{t:.2f}' for t in times['pull'])} s (median {p:.2f} s)")
        print(f"pull's fixed cost (--only logs): median {statistics.median(fixed):.2f} s; "
              f"sha256 of the exports, one thread: {hashing:.2f} s")
        print(f"pull's speed / rsync's: {r / p:.2f} (target >= 0.90); load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    finally:
        sshd.terminate()
        sshd.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
