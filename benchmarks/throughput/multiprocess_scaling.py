"""Training images/s with one process against two processes (jax.distributed) on this
machine; prints one JSON object.

    python -m benchmarks.throughput.multiprocess_scaling --config shapes_demo --batch-size 16 \
        --steps 40

Each run is the plain ``jaxdet train`` command on the same config and global batch, in a fresh
workdir, with evaluation off: one process driving every core, then two processes (one CPU
device each, coordinator on 127.0.0.1) each reading half of every global batch. By turns for
``--rounds`` rounds; the rate is the one ``jaxdet train`` prints (after the compile), the
median kept. ``efficiency`` = two-process rate / one-process rate. On one machine both runs
share the same cores, so this measures what the multi-process machinery costs (collectives,
two input pipelines), not how a run scales with hosts: for that, the same command on several
machines (see the cluster recipes). ``--platform gpu`` on a machine with two GPUs: one process
on both GPUs against two processes of one GPU each.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import common

RATE = re.compile(r"trained \d+ steps \([\d-]+\); ([\d.]+) img/s")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(processes: int, config: str, sets: list[str], workdir: Path, platform: str) -> float:
    """The img/s ``jaxdet train`` prints: one process (on a GPU machine: GPUs 0 and 1), or
    ``processes`` of them (on a GPU machine: one GPU each)."""
    cmd = [sys.executable, "-m", "jaxdet.cli.main", "train", "--config", config, "--workdir",
           str(workdir), "--no-eval", "--no-progress", "--set=parallel.data=-1",
           *[f"--set={s}" for s in sets]]
    env = dict(os.environ, JAX_PLATFORMS=platform)

    def own(i: int | None) -> dict[str, str]:
        if platform != "gpu":
            return env
        return {**env, "CUDA_VISIBLE_DEVICES": "0,1" if i is None else str(i)}

    if processes == 1:
        done = subprocess.run(cmd, env=own(None), capture_output=True, text=True, check=True)
        outputs = [done.stdout]
    else:
        port = _port()
        procs = [subprocess.Popen(
            [*cmd, "--coordinator-address", f"127.0.0.1:{port}", "--num-processes",
             str(processes), "--process-id", str(i)],
            env=own(i), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i in range(processes)]
        outputs = [p.communicate()[0] for p in procs]
        if any(p.returncode for p in procs):
            raise RuntimeError(f"a process failed: {[p.returncode for p in procs]}")
    match = RATE.search(outputs[0])
    if match is None:
        raise RuntimeError(f"no rate in: {outputs[0][-500:]}")
    return float(match[1])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="shapes_demo")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--platform", choices=("cpu", "gpu"), default="cpu",
                        help="gpu: one process on GPUs 0 and 1 against one process per GPU")
    args = parser.parse_args(argv)
    sets = [f"train.batch_size={args.batch_size}", f"train.num_steps={args.steps}",
            f"train.checkpoint_every={args.steps}", "train.log_every=10"]
    with tempfile.TemporaryDirectory() as tmp:
        fresh = itertools.count()  # a fresh workdir per run
        rates = common.by_turns(
            {n: (lambda n=n: _run(n, args.config, sets, Path(tmp) / f"{n}_{next(fresh)}",
                                  args.platform)) for n in (1, 2)},
            args.rounds, report=lambda n, rate: common.report_progress(
                f"{n}_process_images_per_second", rate))
    one, two = common.median(rates[1]), common.median(rates[2])
    result = {"benchmark": "multiprocess_scaling", "config": args.config,
              "platform": args.platform,
              "global_batch": args.batch_size, "steps": args.steps,
              "one_process": {"images_per_second": one, "rounds": rates[1]},
              "two_processes": {"images_per_second": two, "rounds": rates[2]},
              "efficiency": round(two / one, 3), "machine": common.machine_info()}
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
