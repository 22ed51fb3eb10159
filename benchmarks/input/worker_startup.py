"""How fast the train loader's worker processes start, and what their fork server imports;
prints one JSON object.

    python -m benchmarks.input.worker_startup --workers 12
    python -m benchmarks.input.worker_startup --workers 12 --config retinanet_resnet50_fpn_640 \\
        --set data.train.type=tfrecord ...

The workers are forked from one server process that imports the data modules once
(``jaxdet.data.worker_pool``). Measured on the config's training data (default: the demo's
generated shapes):

* **ready**: the loader built with ``--workers`` worker processes, the seconds from its first
  ``next()`` to the first batch and to the ``--workers``-th (batch k comes from worker
  k mod n, so by then every worker has started and made one batch). ``first_pool``: the first
  loader of this process, which also starts the fork server; then, by turns over ``--rounds``
  rounds against the same loader with threads (``worker_count`` 0), later loaders (the server
  is running: what every later loader of a run pays, e.g. each evaluation pass), medians.
* **the fork server's start**: what the server does once before it forks anything, alone: a
  fresh interpreter importing ``worker_pool.PRELOAD`` under ``python -X importtime``: its wall
  seconds, the modules it imports, the packages that cost most, and whether it started a JAX
  backend (on a GPU host that would cost seconds and device memory).
"""

from __future__ import annotations

import argparse
import json
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


def server_start() -> dict:
    """A fresh interpreter doing what the fork server does before its first fork (see the
    module docstring), timed, with ``-X importtime``."""
    from jaxdet.data.worker_pool import PRELOAD

    modules = [m for m in PRELOAD if m != "__main__"]
    script = ("import sys\n"
              + "".join(f"import {m}\n" for m in modules)
              + "from jax._src import xla_bridge\n"
              "print(len(sys.modules), int(bool(xla_bridge._backends)))\n")
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
    imported, backend = done.stdout.split()[-2:]
    return {"wall_s": round(wall, 2), "modules": int(imported),
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
        start = server_start()
        first = time_to_batches(config, workdir, args.workers, args.workers)
        timed = common.by_turns(
            {"workers": lambda: time_to_batches(config, workdir, args.workers, args.workers),
             "threads": lambda: time_to_batches(config, workdir, 0, args.workers)},
            args.rounds, report=common.report_progress)
    key = f"batch_{args.workers}_s"
    result = {
        "benchmark": "worker_startup", "config": args.config, "overrides": args.overrides,
        "workers": args.workers, "rounds": args.rounds,
        "first_pool_ready_s": {"first_batch": first["first_batch_s"],
                               f"batch_{args.workers}": first[key]},
        "ready_s": {side: {"first_batch": common.median(r["first_batch_s"] for r in runs),
                           f"batch_{args.workers}": common.median(r[key] for r in runs)}
                    for side, runs in timed.items()},
        "fork_server_start": start,
        "machine": common.machine_info(devices=False),
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
