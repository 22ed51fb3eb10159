"""Inference latency and throughput of a config (forward + decode + NMS); prints one JSON object.

    python -m benchmarks.throughput.inference --config retinanet_resnet50_fpn_640 \
        --batch-sizes 1 8 --iters 5 --set precision=fp32

Images are random normal at the model's input size; the jitted ``task.predict`` (backbone,
neck, heads, box decoding, score conversion and batched NMS, as ``jaxdet eval`` and
``jaxdet predict`` run it) is compiled once per batch size (timed apart), run ``--warmup``
times untimed, then timed over ``--iters`` calls. ``latency_ms`` is the median call;
``images_per_second`` is batch / median.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

from benchmarks import common
from jaxdet import tasks
from jaxdet.backends.process import reexec_with_fast_allocator
from jaxdet.config.loader import load_config
from jaxdet.data import build as data_build
from jaxdet.train import build as train_build


class OurPredictor:
    """The jitted detector of a config on random images of one batch size.

    ``compile_s`` is the time of the first call (tracing, XLA compile and one run).
    """

    def __init__(self, config, batch_size: int, seed: int = 0):
        self.task = tasks.build_task(config)
        self.params, self.batch_stats = self.task.initial_variables()
        size = self.task.input_size
        self.images = jax.device_put(
            common.random_images(np.random.default_rng(seed), batch_size, size))
        self.image_info = jax.device_put(common.image_info(batch_size, size))
        self.predict = jax.jit(self.task.predict,
                               compiler_options=train_build.predict_compiler_options(config))
        t0 = time.perf_counter()
        self()
        self.compile_s = time.perf_counter() - t0
        compiled = self.predict.lower(
            self.params, self.batch_stats, self.images, self.image_info
        ).compile()
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        self.flops = float((cost or {}).get("flops", float("nan")))

    def __call__(self) -> None:
        det = self.predict(self.params, self.batch_stats, self.images, self.image_info)
        jax.block_until_ready(det["num_detections"])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="retinanet_resnet50_fpn_640")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed calls after the compiling one, before timing")
    args = parser.parse_args(argv)

    config = load_config(args.config, args.overrides)
    results = []
    for batch_size in args.batch_sizes:
        ours = OurPredictor(config, batch_size)
        row = {"batch_size": batch_size, "compile_and_first_call_s": round(ours.compile_s, 2)}
        row.update(common.latency(common.timed_calls(ours, args.iters, warmup=args.warmup),
                                  batch_size))
        # XLA's count of the compiled call: Winograd convolutions (CPU) count their own, fewer
        # multiplies, so this is not the model's arithmetic.
        row["xla_gflops_per_image"] = round(ours.flops / batch_size / 1e9, 2)
        results.append(row)
    result = {
        "benchmark": "inference_throughput",
        "config": args.config,
        "overrides": args.overrides,
        "precision": config.precision,
        "input_size": list(data_build.input_size(config.data)),
        "results": results,
        **common.machine_info(),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    reexec_with_fast_allocator()
    main()
