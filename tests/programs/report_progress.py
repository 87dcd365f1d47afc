"""A rank program that reports like a training, for the tests of watching a run: every rank
reports each step to hpctrain (`import hpctrain_progress`, as the library hooks do) with a
reward of 10 x step, and rank 0 logs the same reward to TensorBoard (RUN_DIR/tb/) with
TensorBoard's own writer.

--hold-at K: after step K, wait until RUN_DIR/release exists (the test creates it once it has
seen the progress it waits for: an event, not a sleep), at most --hold-for seconds.
"""
import argparse
import os
import sys
import time

import hpctrain_progress


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--hold-at", type=int, default=0)
    p.add_argument("--hold-for", type=float, default=300)
    args = p.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    run_dir = os.environ["HPCTRAIN_RUN_DIR"]
    writer = None
    if rank == 0:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
        writer = EventFileWriter(os.path.join(run_dir, "tb"))
    for step in range(1, args.steps + 1):
        reward = 10.0 * step
        hpctrain_progress.report(step, reward=reward, loss=1.0 / step)
        if writer:
            value = summary_pb2.Summary.Value(tag="train/reward", simple_value=reward)
            writer.add_event(event_pb2.Event(wall_time=time.time(), step=step,
                                             summary=summary_pb2.Summary(value=[value])))
            writer.flush()
        if step == args.hold_at:
            release = os.path.join(run_dir, "release")
            deadline = time.monotonic() + args.hold_for
            while not os.path.exists(release):
                if time.monotonic() > deadline:
                    print(f"rank {rank}: never released", file=sys.stderr)
                    return 1
                time.sleep(0.1)
    if writer:
        writer.close()
    print(f"rank {rank}: reported {args.steps} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
