"""How fast the train loader's worker processes start, and what each one imports; prints one
JSON object.

    python -m benchmarks.input.worker_startup --workers 12
    python -m benchmarks.input.worker_startup --workers 12 --config retinanet_resnet50_fpn_640 \\
        --set data.train.type=tfrecord ...

Two measurements, on the config's training data (default: the demo's generated shapes):

* **ready**: the loader built with ``--workers`` worker processes, the seconds from its first
  ``next()`` to the first batch and to the ``--workers``-th (batch k comes from worker
  k mod n, so by then every worker has started and made one batch), against the same loader
  with threads (``worker_count`` 0), by turns over ``--rounds`` rounds, medians.
* **one worker's start**: what a worker process does before its first sample, alone: a fresh
  interpreter (as ``spawn`` starts one) importing the loader's main module, grain's worker
  module and unpickling the loader's sample map, then making one sample, run under
  ``python -X importtime``: its wall seconds, the modules it imports, the packages that cost
  most, the first sample's seconds, and whether it started a JAX backend (on a GPU host that
  would cost each worker seconds and device memory).

On a machine with fewer cores than workers the workers share the cores, so "ready" grows
with workers / cores times one worker's start; on a host with a core per worker it is about
one worker's start.
"""

from __future__ import annotations

import argparse
import json
import pickle
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from benchmarks import common

_IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)")


def _loader(config, workdir: Path, workers: int):
    from jaxdet import tasks

    config = config.model_copy(update={"data": config.data.model_copy(
        update={"worker_count": workers})})
    family = tasks.resolve(config)
    source = family.build_source(workdir, "train")
    return family.data.build_train_loader(config, source)


def time_to_batches(config, workdir: Path, workers: int, batches: int) -> dict:
    """Seconds from a new loader's first ``next()`` to its first batch and to batch
    ``batches``."""
    loader = _loader(config, workdir, workers)
    t0 = time.perf_counter()
    next(loader)
    first = time.perf_counter() - t0
    for _ in range(batches - 1):
        next(loader)
    last = time.perf_counter() - t0
    loader.close()
    return {"first_batch_s": round(first, 3), f"batch_{batches}_s": round(last, 3)}


def one_worker_start(config, workdir: Path) -> dict:
    """A fresh interpreter doing what a spawned worker does before its first sample (see the
    module docstring), timed, with ``-X importtime``."""
    from jaxdet.data import loader as loader_module

    loader = _loader(config, workdir, 0)
    work = loader_module._ShardedTrainMap(loader._rows, loader._map)
    pickled = workdir / "sample_map.pickle"
    pickled.write_bytes(pickle.dumps(work))
    loader.close()
    script = ("import pickle, sys, time\n"
              "import jaxdet.cli.main\n"  # the main module a `jaxdet train` worker re-imports
              "import grain._src.python.dataset.transformations.process_prefetch\n"
              f"work = pickle.loads(open({str(pickled)!r}, 'rb').read())\n"
              "imported = len(sys.modules)\n"
              "t0 = time.perf_counter()\n"
              "work(0)\n"
              "first = time.perf_counter() - t0\n"
              "from jax._src import xla_bridge\n"
              "print(imported, first, int(bool(xla_bridge._backends)))\n")
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", script],
                          capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    by_package: dict[str, float] = defaultdict(float)
    for line in done.stderr.splitlines():
        match = _IMPORT_LINE.match(line)
        if match:
            by_package[match.group(4).split(".")[0]] += int(match.group(1)) / 1e6
    top = sorted(by_package.items(), key=lambda kv: -kv[1])[:8]
    imported, first_sample, backend = done.stdout.split()[-3:]
    return {"wall_s": round(wall, 2), "modules": int(imported),
            "first_sample_s": round(float(first_sample), 3),
            "starts_a_jax_backend": bool(int(backend)),
            "imports_jax": "jax" in by_package, "imports_flax": "flax" in by_package,
            "top_packages_s": {name: round(s, 2) for name, s in top}}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="shapes_demo")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    from jaxdet.config.loader import load_config

    config = load_config(args.config, args.overrides)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        start = one_worker_start(config, workdir)
        timed = common.by_turns(
            {"workers": lambda: time_to_batches(config, workdir, args.workers, args.workers),
             "threads": lambda: time_to_batches(config, workdir, 0, args.workers)},
            args.rounds, report=common.report_progress)
    key = f"batch_{args.workers}_s"
    result = {
        "benchmark": "worker_startup", "config": args.config, "overrides": args.overrides,
        "workers": args.workers, "rounds": args.rounds,
        "ready_s": {side: {"first_batch": common.median(r["first_batch_s"] for r in runs),
                           f"batch_{args.workers}": common.median(r[key] for r in runs)}
                    for side, runs in timed.items()},
        "one_worker_start": start,
        "machine": common.machine_info(devices=False),
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
