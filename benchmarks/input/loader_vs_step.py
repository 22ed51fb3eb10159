"""Does the input pipeline keep up with the train step? The real step fed by the real loader,
against the same step fed one fixed batch; prints one JSON object.

    python -m benchmarks.input.loader_vs_step --config ssd_mobilenet_v2_320 --batch-size 8
    python -m benchmarks.input.loader_vs_step --config shapes_demo --batch-size 32
    python -m benchmarks.input.loader_vs_step --config retinanet_resnet50_fpn_640 \\
        --batch-size 32 --set precision=bf16 \\
        --tfrecord ../shared/data/tfod/pets_examples.record \\
        --records 2000 --label-map ../shared/data/tfod/label_maps/pet_label_map.pbtxt \\
        --num-classes 37                                            # on a GPU host

Both sides run ``train.build.build_train_step(..., normalizer=...)``, the step ``jaxdet train``
compiles (normalization of the uint8 images inside it), on the same state:

* ``loader``: each step takes the next batch of ``data.build.build_train_loader`` (the config's
  augmentations and resizer; ``data.worker_count`` as configured, ``--workers`` to change it)
  and puts it on the device, as the training loop does; JAX dispatches the step
  asynchronously, so the loader prepares the next batch while the device computes;
* ``fixed``: every step gets one batch of that loader, put on the device once.

``--rounds`` rounds of ``--steps`` timed steps each (after ``--warmup``), by turns (fixed, then
a loader for each ``--workers`` value, e.g. ``--workers 0 12``: threads, then 12 processes); the
``ratio`` of a round is fixed time / loader time (1.0: the loader costs the step nothing; on a
CPU the loader's threads share the cores with XLA's, so a ratio below 1 is that share). Data
as in ``benchmarks.input.pipeline``: ``--tfrecord``/``--records``, ``--coco``/``--images``,
or generated shapes (the default, ``--generate`` JPEGs of ``--image-size``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from benchmarks import common


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--pipeline-config")
    which.add_argument("--config")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--tfrecord", nargs="+")
    parser.add_argument("--records", type=int, default=0)
    parser.add_argument("--coco")
    parser.add_argument("--images")
    parser.add_argument("--generate", type=int, default=256)
    parser.add_argument("--image-size", type=int, nargs=2, default=[480, 640])
    parser.add_argument("--label-map")
    parser.add_argument("--num-classes", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workers", type=int, nargs="+", default=[None],
                        help="data.worker_count values, each timed against the fixed batch "
                             "(default: the config's)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.pipeline_config is None and args.config is None:
        args.config = "shapes_demo"

    import jax

    from benchmarks.input.pipeline import _config, _prepare_records, warmup_batches
    from jaxdet import tasks
    from jaxdet.data import build as data_build
    from jaxdet.data.loader import resolve_worker_count
    from jaxdet.train import build as train_build
    from jaxdet.train.step import init_train_state

    with tempfile.TemporaryDirectory() as tmp:
        records = _prepare_records(args, Path(tmp))
        configs = {w: _config(args, records, w) for w in args.workers}
        config = configs[args.workers[0]]
        task = tasks.build_task(config)
        tx, schedule = train_build.build_optimizer(config.train)
        source = data_build.build_source(config.data.train, num_classes=config.model.num_classes,
                                       field="data.train")
        loaders = {w: data_build.build_train_loader(c, source,
                                                  layout=data_build.train_batch_layout(c, task))
                   for w, c in configs.items()}
        step = train_build.build_train_step(config, task, tx, schedule,
                                            normalizer=tasks.build_normalizer(config))
        state = init_train_state(task, tx, ema=config.train.ema_decay is not None,
                                 loss_scale=train_build.build_loss_scale(config))
        for w, loader in loaders.items():  # every worker process started before timing
            for _ in range(warmup_batches(0, resolve_worker_count(configs[w].data.worker_count))):
                next(loader)
        fixed = jax.device_put(next(loaders[args.workers[0]]))
        t0 = time.perf_counter()
        state, metrics = step(state, fixed)
        jax.block_until_ready(metrics)
        compile_s = time.perf_counter() - t0

        def run(feed) -> float:
            nonlocal state
            metrics = None
            for _ in range(args.warmup):
                state, metrics = step(state, feed())
            jax.block_until_ready(metrics)
            t0 = time.perf_counter()
            for _ in range(args.steps):
                state, metrics = step(state, feed())
            jax.block_until_ready(metrics)
            return (time.perf_counter() - t0) / args.steps

        feeds = {"fixed": lambda: fixed}
        feeds.update({w: (lambda loader=loader: jax.device_put(next(loader)))
                      for w, loader in loaders.items()})
        try:
            seconds = common.by_turns({w: (lambda feed=feed: run(feed))
                                       for w, feed in feeds.items()}, args.rounds)
        finally:
            for loader in loaders.values():
                loader.close()
    rounds = {w: [{"loader_step_s": round(with_loader, 4), "fixed_step_s": round(with_fixed, 4),
                   "ratio": round(with_fixed / with_loader, 3)}
                  for with_loader, with_fixed in zip(seconds[w], seconds["fixed"], strict=True)]
              for w in args.workers}

    def summary(runs: list[dict]) -> dict:
        return {
            "rounds": runs,
            "ratio_median": common.median(r["ratio"] for r in runs),
            "loader_images_per_second_median": round(args.batch_size / common.median(
                r["loader_step_s"] for r in runs), 1),
            "fixed_images_per_second_median": round(args.batch_size / common.median(
                r["fixed_step_s"] for r in runs), 1),
        }

    result = {
        "benchmark": "loader_vs_step",
        "config": args.pipeline_config or args.config,
        "batch_size": args.batch_size,
        "precision": config.precision,
        "image_dtype": str(fixed["images"].dtype),
        "compile_s": round(compile_s, 1),
        "by_workers": {str(resolve_worker_count(c.data.worker_count)): summary(rounds[w])
                       for w, c in configs.items()},
        "machine": common.machine_info(),
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    from jaxdet.backends.process import reexec_with_fast_allocator

    reexec_with_fast_allocator()  # as the jaxdet command runs
    main()
