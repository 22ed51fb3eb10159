"""A 3x3 stride-1 convolution by XLA's own convolution against Winograd's F(4x4, 3x3)
(``jaxdet.backends.dispatch.winograd_conv3x3``); prints one JSON object per shape.

    python -m benchmarks.cpu.winograd                   # RetinaNet-ResNet50 640's shapes
    python -m benchmarks.cpu.winograd --shapes 8x80x80x256x256 --grad

A shape is BxHxWxCxO (NHWC input, O output channels). Each function is jitted the way the
models compile it on CPU (the detectors' train steps and ResNet predict calls give convolutions
to Eigen, ``backends.dispatch.compiler_options``); ``--grad`` times the gradient of a sum over
the output with respect to input and kernel too. Times are the mean of ``--calls`` calls after
3 untimed ones. ``chosen``: whether the models' convolution router
(``dispatch.conv_general_dilated``) takes the Winograd form at that shape.
"""

from __future__ import annotations

import argparse
import json
import time

from benchmarks import common
from jaxdet.backends.process import reexec_with_fast_allocator

DN = ("NHWC", "HWIO", "NHWC")
DEFAULT_SHAPES = [
    "1x80x80x256x256", "1x40x40x256x256", "1x20x20x256x256", "1x10x10x256x256",
    "8x80x80x256x256", "8x40x40x256x256", "8x20x20x256x256", "8x10x10x256x256",
    "8x80x80x256x540", "1x160x160x64x64", "8x160x160x64x64", "1x80x80x128x128",
    "8x80x80x128x128", "1x20x20x512x512", "8x20x20x512x512", "2x80x80x256x256",
]


def _seconds(fn, args, calls: int) -> float:
    import jax

    for _ in range(3):
        jax.block_until_ready(fn(*args))
    start = time.perf_counter()
    for _ in range(calls):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / calls


def _direct(x, kernel):
    """XLA's own convolution, stride 1, padding 1."""
    import jax

    return jax.lax.conv_general_dilated(x, kernel, (1, 1), ((1, 1), (1, 1)),
                                        dimension_numbers=DN)


def _routed_to_winograd(x, kernel) -> bool:
    """Whether ``dispatch.conv_general_dilated`` takes the Winograd form for this convolution
    (its forward pass then holds no convolution)."""
    import jax

    from jaxdet.backends import dispatch

    text = jax.jit(lambda a, k: dispatch.conv_general_dilated(
        a, k, (1, 1), ((1, 1), (1, 1)), dimension_numbers=DN)).lower(x, kernel).as_text()
    return "stablehlo.convolution" not in text


def measure(shape: str, grad: bool, calls: int) -> dict:
    import jax
    import jax.numpy as jnp

    from jaxdet.backends import dispatch

    batch, height, width, channels, out_channels = (int(v) for v in shape.split("x"))
    x = jax.random.normal(jax.random.key(0), (batch, height, width, channels))
    kernel = jax.random.normal(jax.random.key(1), (3, 3, channels, out_channels)) * 0.05
    options = dispatch.compiler_options(eigen_convolutions=True)
    result = {"shape": shape, "gmacs": round(batch * height * width * channels * out_channels
                                             * 9 / 1e9, 3)}
    outputs = {}
    for name, fn in (("direct", _direct), ("winograd", dispatch.winograd_conv3x3)):
        jitted = jax.jit(fn, compiler_options=options)
        outputs[name] = jitted(x, kernel)
        result[f"{name}_ms"] = round(_seconds(jitted, (x, kernel), calls) * 1e3, 2)
        if grad:
            gradient = jax.jit(jax.grad(lambda x, k, fn=fn: jnp.sum(jnp.sin(fn(x, k))),
                                        argnums=(0, 1)), compiler_options=options)
            result[f"{name}_grad_ms"] = round(_seconds(gradient, (x, kernel), calls) * 1e3, 2)
    scale = float(jnp.max(jnp.abs(outputs["direct"])))
    result["max_relative_error"] = float(
        jnp.max(jnp.abs(outputs["winograd"] - outputs["direct"])) / scale)
    result["speedup"] = round(result["direct_ms"] / result["winograd_ms"], 2)
    result["chosen"] = _routed_to_winograd(x, kernel)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=DEFAULT_SHAPES)
    parser.add_argument("--grad", action="store_true", help="time the gradient too")
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    reexec_with_fast_allocator()
    for shape in args.shapes:
        record = measure(shape, args.grad, args.calls)
        record.update(benchmark="winograd_conv", **common.machine_info())
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
