"""3D U-Net train-step time with XLA's 3D convolution against the depth-stacked 2D form
(``model.conv_lowering``); prints one JSON object per (config, lowering).

    python -m benchmarks.throughput.unet3d_conv_lowering --config unet3d_demo --steps 10
    python -m benchmarks.throughput.unet3d_conv_lowering --config unet3d_kits19 \
        --set model.patch_size=[64,64,64] --set train.batch_size=1 --steps 3

Batches are random patches (normal intensities, labels uniform over the classes) of the
config's patch size; the first step (compile) is timed apart. Both lowerings start from the
same weights, and the loss of their first step is printed so the two can be compared.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

from benchmarks import common
from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.train import build as train_build
from jaxdet.train.step import init_train_state


def time_lowering(name: str, overrides: list[str], lowering: str, steps: int) -> dict:
    config = load_config(name, [*overrides, f"model.conv_lowering={lowering}",
                                "parallel.data=1"])
    task = tasks.build_task(config)
    tx, schedule = train_build.build_optimizer(config.train)
    state = init_train_state(task, tx, ema=False)
    step = train_build.build_train_step(config, task, tx, schedule)
    rng = np.random.default_rng(0)
    m = config.model
    shape = (config.train.batch_size, *m.patch_size)
    batch = {"images": common.random_images(rng, shape[0], shape[1:], m.in_channels),
             "labels": rng.integers(0, m.num_classes, shape).astype(np.int32)}
    start = time.perf_counter()
    state, metrics = step(state, batch)
    first_loss = float(metrics["loss"])
    compile_seconds = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(steps):
        state, metrics = step(state, batch)
    jax.block_until_ready(metrics["loss"])
    seconds = (time.perf_counter() - start) / steps
    return {"config": name, "overrides": overrides, "conv_lowering": lowering,
            "patch_size": list(m.patch_size), "batch_size": config.train.batch_size,
            "step_seconds": round(seconds, 4),
            "patches_per_second": round(config.train.batch_size / seconds, 2),
            "compile_seconds": round(compile_seconds, 1), "first_step_loss": first_loss,
            **common.machine_info()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="unet3d_demo")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--lowerings", nargs="+", default=["native", "depth_stacked"])
    args = parser.parse_args()
    rows = [time_lowering(args.config, args.overrides, lowering, args.steps)
            for lowering in args.lowerings]
    for row in rows:
        print(json.dumps(row))
    if len(rows) == 2:
        print(json.dumps({"speedup": round(rows[0]["step_seconds"] / rows[1]["step_seconds"],
                                           2), "of": rows[1]["conv_lowering"],
                          "over": rows[0]["conv_lowering"]}))


if __name__ == "__main__":
    main()
