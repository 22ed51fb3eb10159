"""Train-step throughput of a config on synthetic batches; prints one JSON object.

    python -m benchmarks.throughput.train --config retinanet_resnet50_fpn_640 \
        --batch-size 8 --steps 20 --set precision=bf16

Images are random normal, each carrying a random number of random boxes (so the step's
static-shape target assignment does real work). The first step (compile) is timed apart, then
``--warmup`` steps run untimed (a CPU process is slower for its first few steps, while its
memory is first touched); throughput is measured over the following ``--steps`` steps. Peak
device memory is reported where the backend exposes it (GPU/TPU).

MFU (model FLOPs utilization) = model FLOPs per image x img/s / the device's peak, with model
FLOPs = 6 x the forward pass's multiply-adds (``jaxdet summary``; forward + backward = 3
passes, 2 FLOPs per multiply-add): recomputation under ``train.remat`` is not counted as useful
work. ``xla_step_flops`` is XLA's own count of the compiled step (recomputation and elementwise
work included). The peak is the device's dense bf16 (or, for fp32 with TF32 allowed, TF32)
tensor-core rate from a small table of known GPUs, or ``--peak-tflops``.
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
from jaxdet.models.inspect import flops_of
from jaxdet.train import build as train_build
from jaxdet.train.step import init_train_state

# Dense tensor-core peak, TFLOP/s: (bf16/fp16, tf32), by a substring of ``device_kind``.
PEAK_TFLOPS = {"H200": (989.4, 494.7), "H100": (989.4, 494.7), "A100": (312.0, 156.0),
               "L4": (121.0, 60.0), "A10": (125.0, 62.5), "V100": (125.0, 0.0)}


def peak_tflops(device_kind: str, precision: str, allow_tf32: bool) -> float | None:
    """The table's peak for this device and precision, or None (unknown device, or plain
    fp32 without TF32)."""
    for name, (half, tf32) in PEAK_TFLOPS.items():
        if name in device_kind:
            if precision in ("bf16", "fp16"):
                return half
            return tf32 if allow_tf32 and tf32 else None
    return None


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="shapes_demo")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--max-boxes", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=5,
                        help="untimed steps after the first, before timing (enough for the "
                             "block cache to hold both buffers of two steps in flight)")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the device's peak TFLOP/s for MFU (default: known GPUs)")
    args = parser.parse_args(argv)

    overrides = list(args.overrides)
    if args.batch_size:
        overrides.append(f"train.batch_size={args.batch_size}")
    config = load_config(args.config, overrides)
    task = tasks.build_task(config)
    tx, schedule = train_build.build_optimizer(config.train)
    step = train_build.build_train_step(config, task, tx, schedule)
    state = init_train_state(task, tx, ema=config.train.ema_decay is not None,
                             loss_scale=train_build.build_loss_scale(config))
    rng = np.random.default_rng(0)
    max_boxes = args.max_boxes or config.data.max_number_of_boxes
    batch_size = config.train.batch_size
    batches = [
        jax.device_put(common.synthetic_batch(rng, batch_size, task.input_size, max_boxes,
                                              task.num_classes, task.batch_layout()))
        for _ in range(4)
    ]

    t0 = time.perf_counter()
    compiled = step.lower(state, batches[0]).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state, metrics = compiled(state, batches[0])
    jax.block_until_ready(metrics["loss"])
    first_step_s = time.perf_counter() - t0
    for i in range(args.warmup):
        state, metrics = compiled(state, batches[(i + 1) % len(batches)])
    jax.block_until_ready(metrics["loss"])

    t0 = time.perf_counter()
    for i in range(args.steps):
        state, metrics = compiled(state, batches[(i + 1) % len(batches)])
    jax.block_until_ready(metrics["loss"])
    elapsed = time.perf_counter() - t0

    images_per_second = batch_size * args.steps / elapsed
    model_flops = 6 * tasks.family(config).summary(config, flops=False)["multiply_adds"]["total"]
    device_kind = str(jax.devices()[0].device_kind)
    peak = args.peak_tflops or peak_tflops(device_kind, config.precision, config.allow_tf32)
    xla_flops = flops_of(compiled.cost_analysis())
    result = {
        "benchmark": "train_throughput",
        "config": args.config,
        "overrides": args.overrides,
        "precision": config.precision,
        "input_size": list(task.input_size),
        "batch_size": batch_size,
        "model_type": getattr(config.model, "type", "ssd"),
        "num_anchors": int(task.anchors.shape[0]) if hasattr(task, "anchors") else None,
        "steps": args.steps,
        "warmup_steps": args.warmup,
        "compile_s": round(compile_s, 2),
        "first_step_s": round(first_step_s, 2),
        "step_ms": round(1000 * elapsed / args.steps, 2),
        "images_per_second": round(images_per_second, 2),
        "model_gflops_per_image": round(model_flops / 1e9, 1),
        "xla_step_gflops": None if xla_flops is None else round(xla_flops / 1e9, 1),
        "peak_tflops": peak,
        "mfu": None if not peak else round(model_flops * images_per_second / (peak * 1e12), 4),
        "final_loss": float(metrics["loss"]),
        "peak_memory_bytes": common.peak_memory_bytes(),
        **common.machine_info(),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    reexec_with_fast_allocator()
    main()
