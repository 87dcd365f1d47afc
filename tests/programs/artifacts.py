"""A rank program that leaves what a trained, evaluated and exported run holds, for `pull`'s
tests (stdlib only: no torch import, fast on 2 cores): two checkpoints (the second newer), an
exported policy of --export-mb MiB, an evaluation record, a video, a TensorBoard event file,
and what a careless or hostile writer leaves: links out of the run and a name with a space."""
import argparse
import os
import time


def write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--export-mb", type=int, default=1)
    parser.add_argument("--export-files", type=int, default=1, help="the export split in this many")
    parser.add_argument("--outside", required=True, help="a folder outside the run to link to")
    args = parser.parse_args()
    run = os.environ["HPCTRAIN_RUN_DIR"]
    write(f"{run}/checkpoints/model_1.pt", b"first" * 1000)
    time.sleep(0.05)
    write(f"{run}/checkpoints/model_2.pt", b"second" * 1000)
    write(f"{run}/exports/policy.onnx", os.urandom((args.export_mb << 20) // args.export_files))
    for i in range(1, args.export_files):
        write(f"{run}/exports/policy-{i}.onnx", os.urandom((args.export_mb << 20) // args.export_files))
    write(f"{run}/eval/model_2.json", b'{"mean_return": 1.5}\n')
    write(f"{run}/videos/play-0.mp4", os.urandom(4096))
    write(f"{run}/tb/events.out.tfevents.1700000000.host.1.0", os.urandom(512))
    write(f"{run}/exports/with space.onnx", b"odd name")
    os.symlink(os.path.join(args.outside, "secret.txt"), f"{run}/exports/leak.onnx")
    os.symlink(args.outside, f"{run}/videos/outside")
    print("artifacts written", flush=True)


if __name__ == "__main__":
    main()
