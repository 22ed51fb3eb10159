"""Activation memory of a train step with and without gradient checkpointing; prints JSON.

    python -m benchmarks.memory.remat --config retinanet_resnet50_fpn_1024 --sizes 1280 2560 \
        --remat none backbone backbone,neck,head

For each image size and ``train.remat`` setting (comma-separated targets, ``none`` for
nothing) it reports ``kept_mib``: the activations the forward pass hands to the backward pass
(the residuals of ``jax.vjp`` of the training loss w.r.t. the parameters, parameters and the
batch themselves excluded), read from the traced program: what remat exists to shrink, before
XLA's scheduling. ``--compile`` also compiles the loss gradient for the default backend and
reads XLA's ``temp`` memory: the real figure on a GPU or TPU. On CPU it does not move with
remat, because XLA:CPU expands the optimization barriers that keep recomputation in the
backward pass (the recomputed ops are then merged back into the forward).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from benchmarks import common


def _kept_bytes(fn, params, *rest) -> int:
    """Bytes of the distinct residuals of ``jax.vjp`` of ``fn(params, *rest)`` w.r.t.
    ``params`` that are none of the inputs (``params`` and ``rest`` are shapes only)."""
    import jax

    closed = jax.make_jaxpr(
        lambda p, *r: jax.vjp(lambda q: fn(q, *r), p)[1]
    )(params, *rest)
    inputs = set(closed.jaxpr.invars)
    kept = {v for v in closed.jaxpr.outvars if hasattr(v, "aval") and not hasattr(v, "val")
            and v not in inputs}
    return sum(v.aval.size * v.aval.dtype.itemsize for v in kept)


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    import jax

    from jaxdet import tasks
    from jaxdet.config.loader import load_config
    from jaxdet.train.step import abstract_train_batch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="retinanet_resnet50_fpn_1024")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1280, 2560])
    parser.add_argument("--remat", nargs="+", default=["none", "backbone", "backbone,neck,head"],
                        help="settings: comma-separated train.remat targets, or none")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--max-boxes", type=int, default=100)
    parser.add_argument("--compile", action="store_true",
                        help="also compile and report XLA's temp memory (real on GPU/TPU)")
    args = parser.parse_args(argv)

    rows = []
    for size in args.sizes:
        base = None
        for setting in args.remat:
            targets = [] if setting == "none" else setting.split(",")
            config = load_config(args.config, [
                *args.overrides,
                f"data.resizer={{name: fixed_shape, height: {size}, width: {size}}}",
                f"train.batch_size={args.batch_size}",
                f"data.max_number_of_boxes={args.max_boxes}",
                f"train.remat=[{', '.join(targets)}]",
            ])
            task = tasks.build_task(config)
            params, stats = jax.eval_shape(task.initial_variables)
            batch = abstract_train_batch(task, args.batch_size)

            def loss(params, stats, batch, task=task):
                return task.loss(params, stats, batch)[0]

            t0 = time.perf_counter()
            kept = _kept_bytes(loss, params, stats, batch)
            row = {"image_size": size, "remat": targets, "kept_mib": kept / 2**20,
                   "trace_s": time.perf_counter() - t0}
            base = kept if base is None else base
            row["kept_ratio"] = base / kept
            if args.compile:
                t0 = time.perf_counter()
                compiled = jax.jit(jax.grad(loss)).lower(params, stats, batch).compile()
                row["temp_mib"] = compiled.memory_analysis().temp_size_in_bytes / 2**20
                row["compile_s"] = time.perf_counter() - t0
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    result = {
        "benchmark": "remat_memory", "config": args.config, "batch_size": args.batch_size,
        "precision": config.precision, **common.machine_info(), "rows": rows,
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
