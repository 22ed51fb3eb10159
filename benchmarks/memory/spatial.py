"""Per-device memory of a train step split over ``spatial`` devices; prints one JSON object.

    python -m benchmarks.memory.spatial --config retinanet_resnet50_fpn_1024 \
        --sizes 1280 2560 --spatial 1 2 4 8 --batch-size 1

For each image size and spatial split, the train step (forward, backward, optimizer update) is
compiled (never run) over a ``(data=1, spatial=s)`` mesh and XLA's memory analysis of the
per-device program is read: ``argument`` (the train state and the batch shard), ``output``,
``temp`` (activations, gradients and scratch: what spatial partitioning divides) and ``alias``.
``temp_ratio`` is temp at the first ``--spatial`` value (1) divided by temp at s; ideal is s.
On a CPU run the devices are emulated (``--devices``, default 8), so this measures XLA's buffer
assignment for that mesh, not a GPU's allocator.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from benchmarks import common


def _configure_devices(argv: list[str]) -> None:
    """Emulate N CPU devices before JAX starts (only matters on a CPU-only machine)."""
    n = 8
    if "--devices" in argv:
        n = int(argv[argv.index("--devices") + 1])
    import jax

    if jax.config.jax_platforms in (None, "", "cpu") and os.environ.get("JAX_PLATFORMS",
                                                                        "cpu") == "cpu":
        jax.config.update("jax_num_cpu_devices", n)


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    _configure_devices(argv)

    from jaxdet import tasks
    from jaxdet.config.loader import load_config
    from jaxdet.parallel.mesh import check_batch_layout, make_mesh
    from jaxdet.parallel.sharding import batch_sharding, state_sharding
    from jaxdet.train import build as train_build
    from jaxdet.train.step import abstract_train_batch, abstract_train_state

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="retinanet_resnet50_fpn_1024")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1280, 2560])
    parser.add_argument("--spatial", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--max-boxes", type=int, default=100)
    parser.add_argument("--devices", type=int, default=8, help="emulated CPU devices")
    args = parser.parse_args(argv)

    rows = []
    for size in args.sizes:
        config = load_config(args.config, [
            *args.overrides,
            f"data.resizer={{name: fixed_shape, height: {size}, width: {size}}}",
            f"train.batch_size={args.batch_size}",
            f"data.max_number_of_boxes={args.max_boxes}",
        ])
        task = tasks.build_task(config)
        tx, schedule = train_build.build_optimizer(config.train)
        loss_scale = train_build.build_loss_scale(config)
        abstract = abstract_train_state(task, tx, ema=config.train.ema_decay is not None,
                                        loss_scale=loss_scale)
        b = args.batch_size
        batch = abstract_train_batch(task, b)
        base_temp = None
        for spatial in args.spatial:
            mesh = make_mesh(1, spatial)
            check_batch_layout(mesh, batch_size=b, image_size=(size, size),
                               max_stride=task.max_stride())
            step = train_build.build_train_step(
                config, task, tx, schedule,
                state_sharding=state_sharding(mesh, abstract),
                batch_sharding=batch_sharding(mesh, task.batch_layout()))
            t0 = time.perf_counter()
            compiled = step.lower(abstract, batch).compile()
            seconds = time.perf_counter() - t0
            mem = compiled.memory_analysis()
            temp = int(mem.temp_size_in_bytes)
            base_temp = temp if spatial == args.spatial[0] else base_temp
            row = {
                "image_size": size, "spatial": spatial,
                "argument_mib": mem.argument_size_in_bytes / 2**20,
                "output_mib": mem.output_size_in_bytes / 2**20,
                "alias_mib": mem.alias_size_in_bytes / 2**20,
                "temp_mib": temp / 2**20,
                "temp_ratio": base_temp / temp,
                "compile_s": seconds,
            }
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    result = {
        "benchmark": "spatial_memory", "config": args.config, "batch_size": args.batch_size,
        "precision": config.precision, **common.machine_info(), "rows": rows,
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
