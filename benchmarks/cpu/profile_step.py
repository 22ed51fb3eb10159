"""Where a compiled train step (or predict call) spends its time, op by op; prints one JSON.

    python -m benchmarks.cpu.profile_step --config ssd_mobilenet_v2_320 --batch-size 8 \
        --set precision=fp32                          # the train step
    python -m benchmarks.cpu.profile_step --config efficientdet_d0 --predict --batch-size 1

The step is compiled and run once, then run ``--steps`` times under ``jax.profiler.trace``.
Every XLA:CPU thunk the trace records (a fusion, a YNNPACK library call, a copy) is matched to
its instruction in the compiled HLO and put in one category:

- ``dot`` / ``conv``: matrix multiplies and convolutions (YNNPACK or Eigen), with their
  multiply-adds counted from the HLO shapes and the rate reached (G multiply-adds/s);
- ``reduce``: reductions (batch-norm statistics, bias and depthwise-kernel gradients);
- ``elementwise``: XLA's loop fusions (activations, batch norm, the shifted-sum depthwise,
  padding and slicing), ``transpose_copy``: copies and layout changes, ``other``: the rest.

``busy_ms`` sums thunk time over both threads (can exceed ``step_ms``; an asynchronous thunk,
such as an Eigen convolution, counts from its start to its end event, its threads together);
``idle_share`` is the part of ``threads x step_ms`` no thunk ran (waiting included in an async
span, so spans overlap and the share is then 0). ``peak_gmacs`` is this machine's measured fp32
rate on a 2048^3 matrix multiply, so each category's rate reads against it.

Memory traffic is counted too: each thunk's ``gbytes`` are its operands and its result (their
HLO shapes, read and written once), and each category's ``gbytes_per_s`` divides them by its
thunk time shared over the threads (``ms / threads``). ``peak_bandwidth`` is this machine's
measured rate for a jitted scale-and-clip (read one array, write another) and a per-channel
sum (read only), both over 64 MB on every thread; the elementwise and reduction rates read
against those. An op near those rates is bound by memory, not arithmetic: only moving fewer
bytes makes it faster.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import common
from jaxdet import tasks
from jaxdet.backends import dispatch
from jaxdet.backends.process import reexec_with_fast_allocator
from jaxdet.config.loader import load_config
from jaxdet.train import build as train_build
from jaxdet.train.step import init_train_state

_WRAPPERS = ("ThunkExecutor", "SlinkyThreadPool", "ThreadpoolListener")
_SHAPE = re.compile(r"^[a-z0-9]+\[([0-9,]*)\]")
_INSTR = re.compile(r"^\s*(?:ROOT )?%(\S+) = (\S+) (\w[\w-]*)\((.*?)\)(.*)$")


_ITEM_BYTES = {"f64": 8, "s64": 8, "u64": 8, "f32": 4, "s32": 4, "u32": 4, "bf16": 2,
               "f16": 2, "s16": 2, "u16": 2, "s8": 1, "u8": 1, "pred": 1}


def _dims(shape: str) -> list[int]:
    m = _SHAPE.match(shape)
    return [int(d) for d in m.group(1).split(",") if d] if m else []


def parse_hlo(text: str) -> tuple[dict, dict]:
    """``computations``: name -> list of (name, shape, opcode, operands, attributes) and
    ``calls``: top-level instruction name -> the computation it calls (fusions)."""
    computations, current = {}, None
    calls = {}
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.rstrip().endswith("{"):
            current = line.split()[1 if line.startswith("ENTRY") else 0].lstrip("%")
            computations[current] = []
            continue
        m = _INSTR.match(line)
        if m and current is not None:
            name, shape, opcode, operands, attrs = m.groups()
            computations[current].append((name, shape, opcode, operands, attrs))
            c = re.search(r"calls=%([\w.\-]+)", attrs)
            if c:
                calls[name] = c.group(1)
    return computations, calls


def _shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape (a tuple's elements summed; unknown element types count 4)."""
    return sum(_ITEM_BYTES.get(t, 4) * int(np.prod([int(d) for d in dims.split(",") if d]))
               for t, dims in re.findall(r"([a-z]+[0-9]*)\[([0-9,]*)\]", shape))


def _traffic(instr, top: dict) -> int:
    """Bytes a top-level instruction reads (its operands) and writes (its result)."""
    _, shape, _, operands, _ = instr
    names = [a.strip().lstrip("%") for a in operands.split(",") if a.strip()]
    return _shape_bytes(shape) + sum(_shape_bytes(top[n][1]) for n in names if n in top)


def _macs(instr, shapes: dict) -> int:
    name, shape, opcode, operands, attrs = instr
    out = int(np.prod(_dims(shape)))
    args = [a.strip().lstrip("%") for a in operands.split(",")]
    if opcode == "dot":
        lhs = _dims(shapes.get(args[0], ""))
        contracting = re.search(r"lhs_contracting_dims=\{([0-9,]*)\}", attrs)
        k = int(np.prod([lhs[int(d)] for d in contracting.group(1).split(",") if d])) \
            if contracting and lhs else 0
        return out * k
    if opcode == "convolution":
        rhs = _dims(shapes.get(args[1], ""))
        labels = re.search(r"dim_labels=\w+_(\w+)->", attrs).group(1)
        # per output element: the kernel's window times its input features (per group)
        return out * int(np.prod([d for d, lab in zip(rhs, labels, strict=True) if lab != "o"]))
    return 0


def classify(name: str, computations: dict, calls: dict, top: dict) -> tuple[str, int]:
    """The category of the thunk ``name`` and its multiply-adds."""
    instr = top.get(name)
    body = computations.get(calls.get(name, ""), [])
    ops = {i[2] for i in body} if body else ({instr[2]} if instr else set())
    shapes = {i[0]: i[1] for i in body}
    core = [i for i in body if i[2] in ("dot", "convolution")] or (
        [instr] if instr and instr[2] in ("dot", "convolution") else [])
    if core:
        if instr is not None and not body:
            shapes = {i[0]: i[1] for i in top.values()}
        kind = "dot" if core[0][2] == "dot" else "conv"
        return kind, sum(_macs(c, shapes) for c in core)
    if "reduce" in ops or "reduce-window" in ops or name.startswith("wrapped_reduce"):
        return "reduce", 0
    if ops <= {"copy", "transpose", "bitcast", "parameter"} or name.startswith(
            ("copy", "transpose")):
        return "transpose_copy", 0
    if instr is not None and instr[2] == "fusion":
        return "elementwise", 0
    return "other", 0


def peak_gmacs(n: int = 2048, calls: int = 5) -> float:
    """Measured fp32 multiply-adds per second (G) of an n^3 jitted matrix multiply."""
    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    t0 = time.perf_counter()
    for _ in range(calls):
        out = f(a)
    out.block_until_ready()
    return n ** 3 * calls / (time.perf_counter() - t0) / 1e9


def peak_bandwidth(megabytes: int = 64, calls: int = 20) -> dict:
    """Measured GB/s of memory traffic: ``elementwise`` (read an f32 array, write its scaled and
    clipped copy: bytes read + written) and ``reduce`` (sum an f32 [N, 96] array over N: bytes
    read), each the best of ``calls`` jitted calls."""
    x = jnp.ones((megabytes * 2 ** 20 // (4 * 96), 96), jnp.float32)
    ops = {"elementwise": (jax.jit(lambda a: jnp.clip(a * 1.5 + 0.5, 0.0, 6.0)), 2 * x.nbytes),
           "reduce": (jax.jit(lambda a: jnp.sum(a, axis=0)), x.nbytes)}
    rates = {}
    for name, (fn, nbytes) in ops.items():
        fn(x).block_until_ready()
        best = float("inf")
        for _ in range(calls):
            t0 = time.perf_counter()
            fn(x).block_until_ready()
            best = min(best, time.perf_counter() - t0)
        rates[name] = round(nbytes / best / 1e9, 1)
    return rates


def profile(fn, args: tuple, steps: int, *, carry: bool,
            warmup: int = 5) -> tuple[dict, float, str]:
    """Compile ``fn`` for ``args``, run it ``1 + warmup`` times (so that the block cache holds
    every buffer of calls in flight: see ``jaxdet.backends.process``; the first touch of fresh
    memory would otherwise be charged to whichever op wrote it), then ``steps`` times traced
    (with ``carry``,
    the first output replaces the first argument: a train state, donated): thunk name ->
    summed ns over the traced calls, the wall seconds per call, and the compiled HLO text."""
    compiled = fn.lower(*args).compile()

    def call():
        nonlocal args
        out = compiled(*args)
        if carry:
            args = (out[0], *args[1:])
        return out

    jax.block_until_ready(call())
    for _ in range(warmup):
        out = call()
    jax.block_until_ready(out)
    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir):
            t0 = time.perf_counter()
            for _ in range(steps):
                out = call()
            jax.block_until_ready(out)
            wall = (time.perf_counter() - t0) / steps
        trace = sorted(glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True))[-1]
        data = jax.profiler.ProfileData.from_file(trace)
    busy = collections.Counter()
    starts, ends = collections.defaultdict(list), collections.defaultdict(list)
    for plane in data.planes:
        for line in plane.lines:
            if line.name == "python" or not line.name.startswith("tf_"):
                continue
            for event in line.events:
                if event.name.startswith(_WRAPPERS):
                    continue
                if event.name.startswith("end: "):  # an asynchronous thunk (Eigen) finished
                    ends[event.name[5:]].append(event.end_ns)
                else:
                    busy[event.name] += event.duration_ns
                    starts[event.name].append(event.start_ns)
    for name, done in ends.items():  # an async thunk's span: its start to its end event
        if len(done) == len(starts.get(name, ())):
            busy[name] = sum(e - s for s, e in zip(sorted(starts[name]), sorted(done),
                                                    strict=True))
    return busy, wall, compiled.as_text()


def breakdown(busy: dict, wall: float, hlo: str, steps: int, threads: int, top_n: int) -> dict:
    computations, calls = parse_hlo(hlo)
    entry = next(reversed(computations))  # ENTRY is printed last
    top = {i[0]: i for i in computations[entry]}
    cats = collections.defaultdict(lambda: {"ms": 0.0, "thunks": 0, "gmacs": 0.0,
                                            "gbytes": 0.0})
    ops = []
    for name, ns in busy.items():
        kind, macs = classify(name, computations, calls, top)
        ms = ns / 1e6 / steps
        traffic = _traffic(top[name], top) if name in top else 0
        cats[kind]["ms"] += ms
        cats[kind]["thunks"] += 1
        cats[kind]["gmacs"] += macs / 1e9
        cats[kind]["gbytes"] += traffic / 1e9
        ops.append((ms, name, kind, top[name][1] if name in top else "", macs, traffic))
    total = sum(c["ms"] for c in cats.values())
    table = {}
    for kind, c in sorted(cats.items(), key=lambda kv: -kv[1]["ms"]):
        table[kind] = {"ms": round(c["ms"], 1), "share": round(c["ms"] / total, 3),
                       "thunks": c["thunks"]}
        if c["gmacs"]:
            table[kind]["gmacs"] = round(c["gmacs"], 2)
            table[kind]["gmacs_per_s"] = round(c["gmacs"] / (c["ms"] / 1e3), 1)
        if c["gbytes"]:
            table[kind]["gbytes"] = round(c["gbytes"], 2)
            table[kind]["gbytes_per_s"] = round(c["gbytes"] / (c["ms"] / threads / 1e3), 1)
    ops.sort(reverse=True)
    return {"step_ms": round(wall * 1e3, 1), "busy_ms": round(total, 1),
            "idle_share": round(max(0.0, 1 - total / (threads * wall * 1e3)), 3),
            "categories": table,
            "top_ops": [{"name": n, "kind": k, "ms": round(ms, 2), "shape": s,
                         **({"gmacs_per_s": round(m / 1e9 / (ms / 1e3), 1)} if m else {}),
                         **({"mbytes": round(b / 1e6, 1)} if b else {})}
                        for ms, n, k, s, m, b in ops[:top_n]]}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="ssd_mobilenet_v2_320")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--predict", action="store_true", help="profile inference instead")
    parser.add_argument("--max-boxes", type=int, default=16)
    parser.add_argument("--top", type=int, default=15, help="how many single ops to list")
    parser.add_argument("--hlo-out", default=None,
                        help="write the compiled HLO text here (to read a top op's fusion)")
    args = parser.parse_args(argv)
    if not dispatch.on_cpu():
        raise SystemExit("profile_step reads XLA:CPU's thunk trace; run it on CPU")

    overrides = list(args.overrides)
    if args.batch_size:
        overrides.append(f"train.batch_size={args.batch_size}")
    config = load_config(args.config, overrides)
    task = tasks.build_task(config)
    batch_size = config.train.batch_size
    rng = np.random.default_rng(0)
    if args.predict:
        params, batch_stats = task.initial_variables()
        images = jnp.asarray(common.random_images(rng, batch_size, task.input_size))
        info = jnp.asarray(common.image_info(batch_size, task.input_size))
        predict = jax.jit(task.predict,
                          compiler_options=train_build.predict_compiler_options(config))
        busy, wall, hlo = profile(predict,
                                  (params, batch_stats, images, info), args.steps,
                                  carry=False)
    else:
        tx, schedule = train_build.build_optimizer(config.train)
        step = train_build.build_train_step(config, task, tx, schedule)
        state = init_train_state(task, tx, ema=config.train.ema_decay is not None,
                                 loss_scale=train_build.build_loss_scale(config))
        batch = jax.device_put(common.synthetic_batch(rng, batch_size, task.input_size,
                                                      args.max_boxes, task.num_classes,
                                                      task.batch_layout()))
        busy, wall, hlo = profile(step, (state, batch), args.steps, carry=True)
    if args.hlo_out:
        with open(args.hlo_out, "w") as f:
            f.write(hlo)
    threads = os.cpu_count() or 1
    result = {"benchmark": "profile_step", "config": args.config, "overrides": args.overrides,
              "what": "predict" if args.predict else "train_step", "batch_size": batch_size,
              **breakdown(busy, wall, hlo, args.steps, threads, args.top),
              "peak_gmacs": round(peak_gmacs(), 1),
              "peak_bandwidth_gbytes_per_s": peak_bandwidth(), **common.machine_info()}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    reexec_with_fast_allocator()
    main()
