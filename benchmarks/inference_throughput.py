"""Inference latency and throughput of a config (forward + decode + NMS); prints one JSON object.

    python benchmarks/inference_throughput.py --config retinanet_resnet50_fpn_640 \
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
import os
import platform
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxdet import tasks
from jaxdet.backends.cpu.allocator import reexec_with_fast_allocator
from jaxdet.config.loader import load_config
from jaxdet.data import build as data_build
from jaxdet.train import build as train_build


def timed_calls(fn: Callable[[], object], iters: int) -> list[float]:
    """Seconds taken by each of ``iters`` calls of ``fn`` (which must block until done)."""
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


class OurPredictor:
    """The jitted detector of a config on random images of one batch size.

    ``compile_s`` is the time of the first call (tracing, XLA compile and one run).
    """

    def __init__(self, config, batch_size: int, seed: int = 0):
        self.task = tasks.build_task(config)
        self.params, self.batch_stats = self.task.initial_variables()
        height, width = self.task.input_size
        rng = np.random.default_rng(seed)
        self.images = jax.device_put(
            rng.normal(size=(batch_size, height, width, 3)).astype(np.float32)
        )
        self.image_info = jnp.tile(
            jnp.asarray([[height, width, height, width]], jnp.float32), (batch_size, 1)
        )
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


def summarize(times: list[float], batch_size: int) -> dict:
    median = statistics.median(times)
    return {
        "latency_ms": round(1000 * median, 1),
        "min_ms": round(1000 * min(times), 1),
        "images_per_second": round(batch_size / median, 3),
        "iters": len(times),
    }


def machine_info() -> dict:
    return {
        "backend": jax.default_backend(),
        "device": str(jax.devices()[0].device_kind),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "jax": jax.__version__,
    }


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
        timed_calls(ours, args.warmup)
        row.update(summarize(timed_calls(ours, args.iters), batch_size))
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
        **machine_info(),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    reexec_with_fast_allocator()
    main()
