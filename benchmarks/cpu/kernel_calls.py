"""How many of jaxdet's CPU kernels (``jaxdet_*`` custom calls) each config's train step holds
on this backend; prints one JSON object.

    python -m benchmarks.cpu.kernel_calls
    python -m benchmarks.cpu.kernel_calls --configs ssd_mobilenet_v2_320:8

On a CPU the train steps call the kernels (``jaxdet_*`` XLA FFI targets); on a GPU or TPU none may
appear: the CPU-only rewrites leave those backends' steps as XLA builds them. Each step is only
lowered (not compiled); the counts of custom calls and of convolutions in its StableHLO are
reported with the backend.
"""

from __future__ import annotations

import argparse
import json

import jax
import numpy as np

from benchmarks import common
from jaxdet import tasks
from jaxdet.backends import dispatch
from jaxdet.config.loader import load_config
from jaxdet.train import build as train_build
from jaxdet.train.step import init_train_state

ISSUE_22 = ("ssd_mobilenet_v2_320:8", "efficientdet_d0:2", "retinanet_resnet50_fpn_640:2")


def step_text(name: str, batch_size: int) -> str:
    """The StableHLO of ``name``'s fp32 train step at ``batch_size`` (synthetic batch)."""
    config = load_config(name, ["precision=fp32", f"train.batch_size={batch_size}"])
    task = tasks.build_task(config)
    tx, schedule = train_build.build_optimizer(config.train)
    batch = common.synthetic_batch(np.random.default_rng(0), batch_size, task.input_size, 16,
                                   task.num_classes, task.batch_layout())
    state = init_train_state(task, tx, ema=config.train.ema_decay is not None,
                             loss_scale=train_build.build_loss_scale(config))
    return train_build.build_train_step(config, task, tx, schedule).lower(state, batch).as_text()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=list(ISSUE_22),
                        help="CONFIG:BATCH_SIZE pairs")
    args = parser.parse_args(argv)
    rows = []
    for pair in args.configs:
        name, batch_size = pair.split(":")
        text = step_text(name, int(batch_size))
        rows.append({"config": name, "batch_size": int(batch_size),
                     "jaxdet_kernel_calls": text.count("@jaxdet_"),
                     "custom_calls": text.count("custom_call"),
                     "convolutions": text.count("stablehlo.convolution")})
    result = {"benchmark": "cpu_kernel_calls", "devices": [str(d) for d in jax.devices()],
              "kernels_usable": dispatch.on_cpu() and dispatch.kernels_available(),
              "train_steps": rows, **common.machine_info()}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
