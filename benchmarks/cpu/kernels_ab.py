"""A train step (or a predict call) with jaxdet's CPU kernels and without them, alternating in
one process; prints one JSON object.

    python -m benchmarks.cpu.kernels_ab --config ssd_mobilenet_v2_320 --batch-size 8
    python -m benchmarks.cpu.kernels_ab --config retinanet_resnet50_fpn_640 --batch-size 2 \\
        --rounds 5 --steps 2
    python -m benchmarks.cpu.kernels_ab --config efficientdet_d0 --batch-size 8 --predict

``--predict`` times ``task.predict`` on random images instead (its kernel: NMS's per-class
top k) and reports whether both versions gave equal detections.

Both steps are compiled from the same state and batch (synthetic, 1-16 random boxes per image,
as ``benchmarks.throughput.train``), one traced with the kernels (jaxdet's XLA FFI targets,
when ``backends.dispatch.kernels_available()``) and one inside ``backends.trace.portable()``
(the portable jnp paths). Each round times ``--steps``
steps of one, then of the other, so that the machine's drift (2-core VMs vary by 10-30% over
minutes) falls on both alike; the medians and each round are reported, with the compile times.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

from benchmarks import common
from jaxdet import tasks
from jaxdet.backends import dispatch, trace
from jaxdet.backends.process import reexec_with_fast_allocator
from jaxdet.config.loader import load_config
from jaxdet.core import portable
from jaxdet.train import build as train_build
from jaxdet.train.step import init_train_state


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="ssd_mobilenet_v2_320")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--max-boxes", type=int, default=16)
    parser.add_argument("--predict", action="store_true", help="time predict calls instead")
    args = parser.parse_args(argv)
    if not dispatch.kernels_available():
        raise SystemExit("jaxdet's CPU kernels are not available here (no C++ compiler, "
                         "or JAXDET_CPU_KERNELS=0)")
    config = load_config(args.config, ["precision=fp32", f"train.batch_size={args.batch_size}",
                                       *args.overrides])
    task = tasks.build_task(config)
    runs = (_predict_runs(config, task, args) if args.predict
            else _train_runs(config, task, args))

    def steps(run: dict) -> float:
        """Milliseconds per call over ``--steps`` calls of one version."""
        t0 = time.perf_counter()
        for _ in range(args.steps):
            run["call"]()
        jax.block_until_ready(run["last"]())
        return (time.perf_counter() - t0) / args.steps * 1e3

    ms = common.by_turns({name: (lambda run=run: steps(run)) for name, run in runs.items()},
                         args.rounds)
    result = {"benchmark": "cpu_kernels_ab", "config": args.config,
              "what": "predict" if args.predict else "train_step",
              "batch_size": args.batch_size, "overrides": args.overrides,
              "rounds": args.rounds, "steps_per_round": args.steps}
    for name, run in runs.items():
        result[name] = {"median_ms": round(common.median(ms[name]), 1),
                        "rounds_ms": [round(t, 1) for t in ms[name]],
                        "compile_s": round(run["compile_s"], 1)}
    result["speedup"] = round(result["jnp"]["median_ms"] / result["kernels"]["median_ms"], 3)
    if args.predict:
        got, want = (jax.device_get(runs[name]["last"]()) for name in ("kernels", "jnp"))
        result["same_detections"] = all(np.array_equal(got[k], want[k]) for k in want)
    result.update(common.machine_info())
    print(json.dumps(result))
    return result


def _compiled_both_ways(lower) -> dict:
    """``{"kernels": (compiled, seconds), "jnp": ...}`` from ``lower()``, a fresh trace each
    (jit caches a function's trace, and ``trace.portable()`` acts at tracing)."""
    out = {}
    for name in ("kernels", "jnp"):
        t0 = time.perf_counter()
        if name == "kernels":
            compiled = lower().compile()
        else:
            with trace.portable():
                compiled = lower().compile()
        out[name] = (compiled, time.perf_counter() - t0)
    return out


def _predict_runs(config, task, args) -> dict:
    params, batch_stats = task.initial_variables()
    images = jax.numpy.asarray(common.random_images(np.random.default_rng(0), args.batch_size,
                                                    task.input_size))
    info = jax.numpy.asarray(common.image_info(args.batch_size, task.input_size))
    options = train_build.predict_compiler_options(config)
    runs = {}
    for name, (compiled, seconds) in _compiled_both_ways(
            lambda: jax.jit(portable.fresh_trace(task.predict), compiler_options=options).lower(
                params, batch_stats, images, info)).items():
        held = {}

        def call(held=held, compiled=compiled):
            held["out"] = compiled(params, batch_stats, images, info)

        runs[name] = _warmed_run(seconds, call, lambda held=held: held["out"], args.warmup)
    return runs


def _train_runs(config, task, args) -> dict:
    tx, schedule = train_build.build_optimizer(config.train)
    batch = jax.device_put(common.synthetic_batch(
        np.random.default_rng(0), args.batch_size, task.input_size, args.max_boxes,
        task.num_classes, task.batch_layout()))
    host_state = jax.tree.map(np.asarray, init_train_state(
        task, tx, ema=config.train.ema_decay is not None,
        loss_scale=train_build.build_loss_scale(config)))
    runs = {}
    for name, (compiled, seconds) in _compiled_both_ways(
            lambda: train_build.build_train_step(config, task, tx, schedule).lower(
                jax.tree.map(jax.numpy.asarray, host_state), batch)).items():
        # each version steps its own copy of the state (the step donates it)
        held = {"state": jax.tree.map(jax.numpy.asarray, host_state)}

        def call(held=held, compiled=compiled):
            held["state"] = compiled(held["state"], batch)[0]

        runs[name] = _warmed_run(seconds, call, lambda held=held: held["state"], args.warmup)
    return runs


def _warmed_run(compile_s: float, call, last, warmup: int) -> dict:
    """One version's record for the timing rounds: ``call()`` (a step or predict call) made
    ``1 + warmup`` times and finished before any timing; ``last()`` returns its latest output."""
    for _ in range(1 + warmup):
        call()
    jax.block_until_ready(last())
    return {"compile_s": compile_s, "call": call, "last": last}


if __name__ == "__main__":
    reexec_with_fast_allocator()
    main()
