"""Per-device memory of the MLPerf 3D U-Net train step under spatial partitioning (JSON lines).

    python -m benchmarks.memory.unet3d --sizes 128 256 --batch-sizes 1 2 \
        --spatial 1 2 4 8 2x2x2 --precision fp32 bf16

The network is MLPerf's (filters 32, 64, 128, 256, 320, 320; 1 input channel, 3 classes) with
its optimizer (SGD + momentum 0.9). For each patch size, batch, precision and spatial split
(``s``: depth over s shards; ``a x b x c``: depth, height, width), the train step (forward,
backward, update) is compiled, never run, over a ``(data=1, spatial...)`` mesh on abstract
arguments (``tasks.unet3d.memory.compiled_step_memory``) and XLA's memory analysis of one
device's program is printed as one JSON object per row (GiB), then a summary object. On a
CPU the devices are emulated (``--xla_force_host_platform_device_count``, set here unless
XLA_FLAGS already sets it): the figures are XLA's buffer assignment for that mesh, not a
GPU's or TPU's allocator.
"""

from __future__ import annotations

import argparse
import json
import math
import os

from benchmarks import common

MLPERF_FILTERS = (32, 64, 128, 256, 320, 320)
_FLAG = "--xla_force_host_platform_device_count"


def _emulate_devices(devices: int) -> None:
    """``devices`` emulated CPU devices, unless XLA_FLAGS already says how many (before jax
    starts its backend)."""
    if _FLAG not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FLAG}={devices}".strip()


def _split(text: str) -> tuple[int, ...]:
    """``"8"`` -> (8,), ``"2x2x2"`` -> (2, 2, 2)."""
    return tuple(int(v) for v in text.lower().split("x"))


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 256],
                        help="patch sides (cubic patches)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--spatial", nargs="+", default=["1", "2", "4", "8", "2x2x2"],
                        help="spatial splits: N (depth over N shards) or DxHxW")
    parser.add_argument("--precision", nargs="+", default=["fp32"], choices=["fp32", "bf16"])
    parser.add_argument("--filters", type=int, nargs="+", default=list(MLPERF_FILTERS))
    parser.add_argument("--devices", type=int, default=8, help="emulated CPU devices")
    args = parser.parse_args(argv)
    _emulate_devices(args.devices)

    import jax.numpy as jnp
    from flax import nnx

    from jaxdet.config.schema import TrainConfig
    from jaxdet.parallel.mesh import MeshLayoutError, make_mesh
    from jaxdet.tasks.unet3d import UNet3D, UNet3DTask
    from jaxdet.tasks.unet3d.memory import GIB, compiled_step_memory
    from jaxdet.train import build as train_build

    train = TrainConfig.model_validate({
        "batch_size": 1, "optimizer": {"name": "momentum", "momentum": 0.9},
        "learning_rate": {"name": "constant", "learning_rate": 0.8}})
    tx, schedule = train_build.build_optimizer(train)
    rows = []
    for size in args.sizes:
        for precision in args.precision:
            dtype = {"fp32": jnp.float32, "bf16": jnp.bfloat16}[precision]
            model = nnx.eval_shape(lambda dtype=dtype: UNet3D(
                1, 3, args.filters, dtype=dtype, rngs=nnx.Rngs(0)))
            task = UNet3DTask(model=model, input_size=(size,) * 3, num_classes=3,
                              compute_dtype=dtype)
            for batch in args.batch_sizes:
                base = None
                for text in args.spatial:
                    split = _split(text)
                    row = {"patch": size, "batch": batch, "precision": precision,
                           "spatial": "x".join(map(str, split)),
                           "devices": math.prod(split)}
                    try:
                        mesh = None if math.prod(split) == 1 else make_mesh(
                            1, spatial_axes=split)
                        mem = compiled_step_memory(task, tx, schedule, batch_size=batch,
                                                   mesh=mesh)
                    except MeshLayoutError as e:
                        row["error"] = str(e)
                        print(json.dumps(row), flush=True)
                        rows.append(row)
                        continue
                    row.update({
                        "argument_gib": mem["argument_bytes"] / GIB,
                        "output_gib": mem["output_bytes"] / GIB,
                        "alias_gib": mem["alias_bytes"] / GIB,
                        "temp_gib": mem["temp_bytes"] / GIB,
                        "generated_code_gib": mem["generated_code_bytes"] / GIB,
                        "total_gib": mem["total_bytes"] / GIB,
                        "peak_gib": None if mem["peak_bytes"] is None
                        else mem["peak_bytes"] / GIB,
                        "compile_s": mem["compile_seconds"],
                    })
                    base = row["total_gib"] if base is None else base
                    row["total_ratio"] = base / row["total_gib"]
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    print(json.dumps({
        "benchmark": "unet3d_memory", "filters": args.filters, "optimizer": "momentum",
        **common.machine_info(), "rows": len(rows),
    }), flush=True)
    return rows


if __name__ == "__main__":
    main()
