"""One process of a multi-process training run, launched by test_multiprocess.py.

    python mp_worker.py --process-id I --num-processes N --coordinator-address HOST:PORT \
        --workdir DIR [--stop-after K] [--devices D] [--set A.B=C ...]

Runs ``jaxdet train`` through the CLI's own path (flags -> jax.distributed -> runs.train) on the
shapes config with the ``--set`` overrides (``--stop-after K``: first a run stopped after step
K, then a second ``runs.train`` that resumes from the checkpoint; ``--until-signal``: first a
run that a signal stops, then the resumed one); writes
``DIR/params_<I>.npz`` (``--out OUT``: ``OUT/params_<I>.npz``; this process's copy of the final
parameters) and prints one JSON line: process index/count, device counts, steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--process-id", type=int, required=True)
    p.add_argument("--num-processes", type=int, required=True)
    p.add_argument("--coordinator-address", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--out", default=None, help="where params_<I>.npz goes (default: --workdir)")
    p.add_argument("--stop-after", type=int, default=None)
    p.add_argument("--until-signal", action="store_true",
                   help="first a run that a SIGTERM / SIGINT stops, then the resumed run")
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--set", dest="overrides", action="append", default=[])
    args = p.parse_args()

    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    jax.config.update("jax_num_cpu_devices", args.devices)
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)

    import numpy as np

    from jaxdet.cli import main as cli
    from jaxdet.config.loader import load_config
    from jaxdet.jobs import runs

    cli_args = cli._parser().parse_args([
        "train", "--config", "shapes_demo", "--workdir", args.workdir, "--no-eval",
        "--coordinator-address", args.coordinator_address,
        "--num-processes", str(args.num_processes), "--process-id", str(args.process_id),
        "--distributed-timeout", "60",
        *[f"--set={o}" for o in args.overrides],
    ])
    started = cli._start_distributed(cli_args)
    config = load_config("shapes_demo", args.overrides)
    progress = cli._is_main_process()
    killed_at = None
    if args.stop_after is not None:  # a run killed after that step (its last checkpoint is
        # older), then a fresh start that resumes from the checkpoint every process wrote
        killed_at = runs.train(config, args.workdir, stop_after=args.stop_after,
                               evaluate=False, progress=progress).step
    stopped = None
    if args.until_signal:
        first = runs.train(config, args.workdir, evaluate=False, progress=progress)
        stopped = {"stopped_by": first.stopped_by, "stopped_at": first.step}
    result = runs.train(config, args.workdir, evaluate=False, progress=progress)
    params = jax.tree_util.tree_flatten_with_path(result.state["params"])[0]
    np.savez(os.path.join(args.out or args.workdir, f"params_{args.process_id}.npz"),
             **{jax.tree_util.keystr(k): np.asarray(v.addressable_data(0)) for k, v in params})
    print(json.dumps({"started": started, "process_index": jax.process_index(),
                      "process_count": jax.process_count(),
                      "local_devices": jax.local_device_count(),
                      "devices": jax.device_count(), "step": result.step,
                      "killed_at": killed_at, "stopped": stopped,
                      "compile_seconds": round(result.compile_seconds, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
