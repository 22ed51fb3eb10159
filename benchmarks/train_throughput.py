"""Train-step throughput of a config on synthetic batches; prints one JSON object.

    python benchmarks/train_throughput.py --config retinanet_resnet50_fpn_640 \
        --batch-size 8 --steps 20 --set precision=bf16

Images are random normal, each carrying a random number of random boxes (so the step's
static-shape target assignment does real work). The first step (compile) is timed apart;
throughput is measured over the following ``--steps`` steps. Peak device memory is reported
where the backend exposes it (GPU/TPU).
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import jax
import numpy as np

from jaxdet import builders
from jaxdet.config.loader import load_config
from jaxdet.train.step import init_train_state


def synthetic_batch(rng: np.random.Generator, batch_size: int, size: tuple[int, int],
                    max_boxes: int, num_classes: int) -> dict:
    """A batch in the loader's layout with 1..max_boxes random boxes per image."""
    boxes = np.zeros((batch_size, max_boxes, 4), np.float32)
    valid = np.zeros((batch_size, max_boxes), bool)
    for b in range(batch_size):
        n = int(rng.integers(1, max_boxes + 1))
        tl = rng.uniform(0.0, 0.7, (n, 2))
        boxes[b, :n] = np.concatenate([tl, tl + rng.uniform(0.05, 0.3, (n, 2))], 1)
        valid[b, :n] = True
    return {
        "images": rng.normal(size=(batch_size, *size, 3)).astype(np.float32),
        "boxes": boxes,
        "classes": rng.integers(0, num_classes, (batch_size, max_boxes)).astype(np.int32),
        "valid": valid,
        "ignore": np.zeros((batch_size, max_boxes), bool),
    }


def peak_memory_bytes() -> int | None:
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="shapes_demo")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--max-boxes", type=int, default=None)
    args = parser.parse_args(argv)

    overrides = list(args.overrides)
    if args.batch_size:
        overrides.append(f"train.batch_size={args.batch_size}")
    config = load_config(args.config, overrides)
    task = builders.build_task(config)
    tx, schedule = builders.build_optimizer(config.train)
    step = builders.build_train_step(config, task, tx, schedule)
    state = init_train_state(task, tx, ema=config.train.ema_decay is not None,
                             loss_scale=builders.build_loss_scale(config))
    rng = np.random.default_rng(0)
    max_boxes = args.max_boxes or config.data.max_number_of_boxes
    batch_size = config.train.batch_size
    batches = [
        jax.device_put(synthetic_batch(rng, batch_size, task.input_size, max_boxes,
                                       task.num_classes))
        for _ in range(4)
    ]

    t0 = time.perf_counter()
    state, metrics = step(state, batches[0])
    jax.block_until_ready(metrics["loss"])
    compile_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    for i in range(args.steps):
        state, metrics = step(state, batches[(i + 1) % len(batches)])
    jax.block_until_ready(metrics["loss"])
    elapsed = time.perf_counter() - t0

    result = {
        "benchmark": "train_throughput",
        "config": args.config,
        "overrides": args.overrides,
        "precision": config.precision,
        "input_size": list(task.input_size),
        "batch_size": batch_size,
        "num_anchors": int(task.anchors.shape[0]),
        "steps": args.steps,
        "compile_and_first_step_s": round(compile_s, 2),
        "step_ms": round(1000 * elapsed / args.steps, 2),
        "images_per_second": round(batch_size * args.steps / elapsed, 2),
        "final_loss": float(metrics["loss"]),
        "peak_memory_bytes": peak_memory_bytes(),
        "device": str(jax.devices()[0].device_kind),
        "backend": jax.default_backend(),
        "cpu_count": __import__("os").cpu_count(),
        "machine": platform.machine(),
        "jax": jax.__version__,
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
