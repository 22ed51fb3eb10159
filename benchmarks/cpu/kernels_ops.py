"""The convolutions jaxdet's CPU kernels serve, forward and backward, with the kernels and
without them (``jaxdet.backends.trace.portable()``); prints one JSON object.

    python -m benchmarks.cpu.kernels_ops
    python -m benchmarks.cpu.kernels_ops --cases depthwise_s1 stem_7x7 --calls 20

Each case is ``jax.grad`` of ``sum(conv(x, kernel) * w)`` with respect to ``x`` and the kernel,
through ``jaxdet.backends.dispatch.conv_general_dilated`` (the router the models' convolutions
go through) or ``dispatch.winograd_conv3x3``, on a layer shape of the detectors of issue 22.
``max_pool`` is the one case without a C kernel: ``jaxdet.core.portable.reduce_window_2d``'s
written-out gradient (first maximum, then strided shifts) against autodiff of
``lax.reduce_window`` (XLA's select-and-scatter), ResNet's 3x3/2 stem pool. ``nms_top_k`` is
the one case of ``predict``: EfficientDet-D0's per-class top 1,000 of 49,104 anchors x 90
classes at batch 8 after the sigmoid (``backends.dispatch.top_k_per_class``), the kernel against
``lax.top_k`` of the transposed scores; its difference is 0 when values and indices are
equal. The two versions
alternate call by call; the median of ``--calls`` each is reported, with the
largest difference between their gradients relative to the largest gradient, and
``uses_kernels``: whether the new version's compiled HLO calls the kernels and the other's
does not (for ``max_pool``: whether the new one has no select-and-scatter).
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from benchmarks import common
from jaxdet.backends import dispatch, trace
from jaxdet.backends.process import reexec_with_fast_allocator
from jaxdet.core import portable

DN = ("NHWC", "HWIO", "NHWC")

# name: (what it is, x shape, kernel shape, strides, padding, groups)
CASES = {
    "depthwise_s1": ("MobileNetV2 3x3 depthwise, stride 1", (8, 75, 75, 144), (3, 3, 1, 144),
                     (1, 1), ((1, 1), (1, 1)), 144),
    "depthwise_s2": ("MobileNetV2 3x3 depthwise, stride 2", (8, 150, 150, 96), (3, 3, 1, 96),
                     (2, 2), ((0, 1), (0, 1)), 96),
    "pointwise": ("MobileNetV2 1x1 expansion", (8, 150, 150, 16), (1, 1, 16, 96), (1, 1),
                  ((0, 0), (0, 0)), 1),
    "stem_3x3": ("MobileNetV2 stem, 3x3 stride 2", (8, 300, 300, 3), (3, 3, 3, 32), (2, 2),
                 ((0, 1), (0, 1)), 1),
    "stem_7x7": ("ResNet-50 stem, 7x7 stride 2", (2, 640, 640, 3), (7, 7, 3, 64), (2, 2),
                 ((3, 3), (3, 3)), 1),
    "winograd_3x3": ("ResNet-50 3x3 at 160x160 (Winograd)", (2, 160, 160, 64), (3, 3, 64, 64),
                     (1, 1), None, 1),
    "max_pool": ("ResNet-50 stem max pool, 3x3 stride 2", (2, 320, 320, 64), None, (2, 2),
                 ((1, 1), (1, 1)), 1),
    "nms_top_k": ("EfficientDet-D0 NMS: sigmoid, top 1,000 per class", (8, 49104, 90), None,
                  None, None, 1),
}


def _alternate(compiled: dict, args: tuple, calls: int) -> tuple[dict, dict]:
    """Each compiled version's result, and its median ms over ``calls`` calls taken in turns."""
    results = {k: jax.block_until_ready(c(*args)) for k, c in compiled.items()}
    times = common.by_turns(
        {k: (lambda c=c: common.timed(lambda: jax.block_until_ready(c(*args)))[1])
         for k, c in compiled.items()}, calls)
    return results, {k: round(common.median(v) * 1e3, 2) for k, v in times.items()}


def run_top_k_case(name: str, calls: int) -> dict:
    """``nms_top_k``: the sigmoid of logits [B, A, C], then each class's top 1,000."""
    what, x_shape, *_ = CASES[name]
    logits = jnp.asarray(np.random.default_rng(0).normal(size=x_shape) * 3 - 4, jnp.float32)

    def fn(x):
        return dispatch.top_k_per_class(jax.nn.sigmoid(x), 1000)

    compiled = {"kernels": jax.jit(portable.fresh_trace(fn)).lower(logits).compile()}
    with trace.portable():
        compiled["jnp"] = jax.jit(portable.fresh_trace(fn)).lower(logits).compile()
    uses = ("jaxdet_top_k" in compiled["kernels"].as_text()
            and "jaxdet_" not in compiled["jnp"].as_text())
    results, ms = _alternate(compiled, (logits,), calls)
    equal = all(bool(jnp.array_equal(a, b))
                for a, b in zip(results["kernels"], results["jnp"], strict=True))
    return {"case": name, "what": what, "x": list(x_shape), "kernel": [],
            "uses_kernels": uses, "jnp_ms": ms["jnp"], "kernels_ms": ms["kernels"],
            "speedup": round(ms["jnp"] / ms["kernels"], 2),
            "max_relative_difference": 0.0 if equal else float("nan")}


def _max_pool_gradient_fn(strides, padding, *, written_out: bool):
    def loss(x, kernel, w):
        if written_out:
            y = portable.reduce_window_2d(x, -jnp.inf, lax.max, (3, 3), strides, padding)
        else:
            y = lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, *strides, 1),
                                  ((0, 0), *padding, (0, 0)))
        return jnp.sum(y * w) + 0.0 * jnp.sum(kernel)
    return jax.grad(loss, argnums=(0, 1))


def _gradient_fn(x_shape, kernel_shape, strides, padding, groups):
    def loss(x, kernel, w):
        if padding is None:
            y = dispatch.winograd_conv3x3(x, kernel)
        else:
            y = dispatch.conv_general_dilated(x, kernel, strides, padding,
                                              dimension_numbers=DN, feature_group_count=groups)
        return jnp.sum(y * w)
    return jax.grad(loss, argnums=(0, 1))


def run_case(name: str, calls: int) -> dict:
    if name == "nms_top_k":
        return run_top_k_case(name, calls)
    what, x_shape, kernel_shape, strides, padding, groups = CASES[name]
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=x_shape), jnp.float32)
    if kernel_shape is None:  # max pool
        kernel = jnp.zeros((1,), jnp.float32)
        out_shape = jax.eval_shape(lambda a: lax.reduce_window(
            a, -jnp.inf, lax.max, (1, 3, 3, 1), (1, *strides, 1), ((0, 0), *padding, (0, 0))),
            x).shape
    else:
        kernel = jnp.asarray(rng.normal(size=kernel_shape) * 0.1, jnp.float32)
        out_shape = jax.eval_shape(
            lambda a, k: lax.conv_general_dilated(a, k, strides, padding or ((1, 1), (1, 1)),
                                                  dimension_numbers=DN,
                                                  feature_group_count=groups),
            x, kernel).shape
    w = jnp.asarray(rng.normal(size=out_shape), jnp.float32)
    if kernel_shape is None:
        compiled = {"kernels": jax.jit(_max_pool_gradient_fn(strides, padding, written_out=True)),
                    "jnp": jax.jit(_max_pool_gradient_fn(strides, padding, written_out=False))}
        compiled = {k: f.lower(x, kernel, w).compile() for k, f in compiled.items()}
        uses = "select-and-scatter" not in compiled["kernels"].as_text()
    else:
        # One function each: jit caches a function's trace, and trace.portable() acts at tracing.
        compiled = {"kernels": jax.jit(_gradient_fn(x_shape, kernel_shape, strides, padding,
                                                    groups)).lower(x, kernel, w).compile()}
        with trace.portable():
            compiled["jnp"] = jax.jit(_gradient_fn(x_shape, kernel_shape, strides, padding,
                                                   groups)).lower(x, kernel, w).compile()
        uses = ("jaxdet_" in compiled["kernels"].as_text()
                and "jaxdet_" not in compiled["jnp"].as_text())
    results, ms = _alternate(compiled, (x, kernel, w), calls)
    difference = max(
        float(jnp.max(jnp.abs(a - b)) / jnp.maximum(jnp.max(jnp.abs(b)), 1e-30))
        for a, b in zip(results["kernels"], results["jnp"], strict=True))
    return {"case": name, "what": what, "x": list(x_shape), "kernel": list(kernel_shape or ()),
            "uses_kernels": uses, "jnp_ms": ms["jnp"], "kernels_ms": ms["kernels"],
            "speedup": round(ms["jnp"] / ms["kernels"], 2),
            "max_relative_difference": float(f"{difference:.2e}")}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args(argv)
    if not (dispatch.on_cpu() and dispatch.kernels_available()):
        raise SystemExit("jaxdet's CPU kernels are not available here (not a CPU backend, no "
                         "C++ compiler, or JAXDET_CPU_KERNELS=0)")
    result = {"benchmark": "cpu_kernels_ops", "calls": args.calls,
              "cases": [run_case(name, args.calls) for name in args.cases],
              **common.machine_info()}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    reexec_with_fast_allocator()
    main()
