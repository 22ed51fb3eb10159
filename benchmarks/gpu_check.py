"""The GPU check: jaxdet against torchvision on one accelerator, in one run, by turns; prints
one JSON object (and writes it to ``--out``).

    python -m benchmarks.gpu_check --out gpu_check.json          # a GPU host, under 8 minutes
    python -m benchmarks.gpu_check --platform cpu --out dry.json # the dry run: tiny stand-ins

For each model, worker processes are started side by side and kept for the whole measurement,
then take turns (``--rounds`` rounds of ``--steps`` timed steps each, after warm-up); the
median over rounds is the figure:

* **jaxdet**, bf16 on a GPU (``precision=bf16``), the train step ``jaxdet train`` compiles,
  at the batch in ``MODELS``: ``fixed`` (one batch of the loader kept on the device: the step
  alone) and ``loader`` (each step fed by the train loader from a TFRecord of real JPEG photos,
  the ducky photos that ship with jaxdet, ``--workers`` worker processes, the batch put on the
  device as the training loop does). The worker also reports its start-up: imports, the
  model's build and the train state's init (with the XLA programs each needed), the step's
  compile, and, once every model's step is compiled (so the host's cores are free), the
  loader's first batch and the seconds until every worker process has made one.
* **torchvision**, the nearest detection models, ``weights=None``, AMP (bf16 autocast) and
  ``channels_last`` on a GPU, SGD with momentum, on synthetic batches already on the device
  (the peer is never input-bound), same batch and resolution (the SSDs keep their own 320 /
  300 inputs).
* peak device memory of each worker (jax: the process's ``peak_bytes_in_use``; torch:
  ``max_memory_allocated``).

``targets`` holds the issue's bars: jaxdet >= 1.5x torchvision on RetinaNet and Faster R-CNN at
equal batch, EfficientDet-D0 >= 1200 img/s, loader-fed >= 0.95 of the fixed batch. Each jaxdet
worker also traces ``--profile-steps`` steps with XLA's profiler: ``profile.top_ops`` names
the kernels that take the time, with their share, so a missed bar comes with its cause.

``--platform cpu`` is the dry run the suite runs (so the script cannot rot): tiny stand-in
configs of the same families (``MODELS``' ``tiny``), batch 2, a few records and steps; the
torch side runs on the CPU if torch is installed and is reported skipped otherwise. With
``--real-configs`` the CPU run takes the GPU's own configs in bf16 at batch 2: a rehearsal
(minutes per model) of everything the GPU run builds and compiles, e.g. under the GPU
machine's versions of jax and flax before a lent GPU's minutes are spent.
On a GPU every model's workers start at once (their compiles overlap on the host's cores; the
models then take the device one after another); ``--deadline-s`` skips the models not yet
measured once that much time has passed, and a model whose worker fails reports ``error``
while the others go on.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import common

# name -> the jaxdet config, its batch on a GPU, the torchvision peers, a tiny stand-in config
MODELS = {
    "retinanet_r50_fpn_640": {"config": "retinanet_resnet50_fpn_640", "batch": 16,
                              "peers": ["retinanet_resnet50_fpn"], "tiny": "shapes_demo"},
    "faster_rcnn_r50_fpn_640": {"config": "faster_rcnn_resnet50_v1_fpn_640", "batch": 8,
                                "peers": ["fasterrcnn_resnet50_fpn"],
                                "tiny": "faster_rcnn_fpn_shapes_demo"},
    "efficientdet_d0_512": {"config": "efficientdet_d0", "batch": 32, "peers": [],
                            "tiny": "efficientdet_d0_shapes"},
    "ssd_mobilenet_v2_320": {"config": "ssd_mobilenet_v2_320", "batch": 64,
                             "peers": ["ssdlite320_mobilenet_v3_large", "ssd300_vgg16"],
                             "tiny": "shapes_demo"},
}
# torchvision builders that take the input size (the SSDs have their own)
_SIZED_PEERS = ("retinanet_resnet50_fpn", "fasterrcnn_resnet50_fpn")
TARGETS = {"retinanet_r50_fpn_640": 1.5, "faster_rcnn_r50_fpn_640": 1.5}
D0_IMAGES_PER_SECOND = 1200
LOADER_SHARE = 0.95
_CPU_WRAPPERS = ("ThunkExecutor", "SlinkyThreadPool", "ThreadpoolListener")


# --------------------------------------------------------------------------- workers


def _reply(message: dict) -> None:
    print(json.dumps(message), flush=True)


def _rounded(figures: dict) -> dict:
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}


def _commands():
    for line in sys.stdin:
        if line.strip():
            yield json.loads(line)


def serve_jaxdet(spec: dict) -> None:
    """One jaxdet model in this process: build, warm up, then run the driver's commands."""
    started = time.perf_counter()
    import jax

    from jaxdet import tasks
    from jaxdet.config.loader import load_config
    from jaxdet.data.loader import resolve_worker_count
    from jaxdet.train import build as train_build
    from jaxdet.train.step import init_train_state

    startup = {"imports_s": time.perf_counter() - started}
    config = load_config(spec["config"], spec["overrides"])
    family = tasks.resolve(config)
    compiled_programs = []  # programs lowered for XLA (compiled, or read from a cache)
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **_: compiled_programs.append(seconds)
        if event == "/jax/core/compile/jaxpr_to_mlir_module_duration" else None)
    t0 = time.perf_counter()
    task = family.build_task()
    jax.block_until_ready(task.initial_variables())
    startup["model_build_s"] = time.perf_counter() - t0
    startup["model_build_programs"] = len(compiled_programs)
    tx, schedule = train_build.build_optimizer(config.train)
    t0, before = time.perf_counter(), len(compiled_programs)
    state = init_train_state(task, tx, ema=config.train.ema_decay is not None,
                             loss_scale=train_build.build_loss_scale(config))
    jax.block_until_ready(state)
    startup["state_init_s"] = time.perf_counter() - t0
    startup["state_init_programs"] = len(compiled_programs) - before
    from jaxdet.data import build as data_build

    layout = data_build.train_batch_layout(config, task)
    step = train_build.build_train_step(config, task, tx, schedule,
                                        normalizer=family.normalizer())
    # a batch from the loader's threads (no worker process yet) to compile the step with
    threads = config.model_copy(update={"data": config.data.model_copy(
        update={"worker_count": 0})})
    source = family.build_source(None, "train")
    threaded = family.data.build_train_loader(threads, source, layout=layout)
    fixed = jax.device_put(next(threaded))
    threaded.close()
    t0 = time.perf_counter()
    step = step.lower(state, fixed).compile()
    startup["step_compile_s"] = time.perf_counter() - t0
    startup["until_compiled_s"] = time.perf_counter() - started
    _reply({"compiled": _rounded(startup), "device": str(jax.devices()[0].device_kind)})
    next(_commands())  # the driver says when the loader may start (the host's cores idle)

    loader = family.data.build_train_loader(config, source, layout=layout)
    workers = resolve_worker_count(config.data.worker_count)
    t0 = time.perf_counter()
    next(loader)
    startup["loader_first_batch_s"] = time.perf_counter() - t0
    if workers <= 1:
        startup["every_worker_ready_s"] = startup["loader_first_batch_s"]
    for i in range(max(spec["warmup"], 2 * workers)):  # every worker process started
        state, metrics = step(state, jax.device_put(next(loader)))
        if i + 2 == workers:  # batch k comes from worker k mod n: each has made one
            startup["every_worker_ready_s"] = time.perf_counter() - t0
    jax.block_until_ready(metrics)
    startup["loader_warmup_s"] = time.perf_counter() - t0
    _reply({"ready": _rounded(startup), "workers": workers})

    def run(feed, steps: int) -> float:
        nonlocal state, metrics
        t0 = time.perf_counter()
        for _ in range(steps):
            state, metrics = step(state, feed())
        jax.block_until_ready(metrics)
        return time.perf_counter() - t0

    feeds = {"fixed": lambda: fixed, "loader": lambda: jax.device_put(next(loader))}
    for command in _commands():
        if "run" in command:
            _reply({"seconds": run(feeds[command["run"]], command["steps"])})
        elif "profile" in command:
            steps = command["profile"]
            _reply({"profile": _profile(lambda steps=steps: run(feeds["fixed"], steps),
                                        command.get("top", 12))})
        else:
            stats = jax.devices()[0].memory_stats() or {}
            loader.close()
            _reply({"peak_memory_bytes": stats.get("peak_bytes_in_use"),
                    "final_loss": float(metrics["loss"])})
            return


def _profile(run, top: int) -> dict:
    """Trace ``run()`` with XLA's profiler: the kernels (GPU) or thunks (CPU) that took the
    time, by total time, with their share of it."""
    import collections
    import glob

    import jax

    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir):
            wall = run()
        data = jax.profiler.ProfileData.from_file(
            sorted(glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True))[-1])
    busy: collections.Counter = collections.Counter()
    for plane in data.planes:
        lines = list(plane.lines)
        if plane.name.startswith("/device:"):
            # one op per event: XLA's op line if the trace has one, else the streams' kernels
            ops = [line for line in lines if line.name == "XLA Ops"]
            lines = ops or [line for line in lines if line.name.startswith("Stream")]
        else:  # XLA:CPU's thunk threads, without the executor's wrapping spans
            lines = [line for line in lines if line.name.startswith("tf_")]
        for line in lines:
            for event in line.events:
                if not event.name.startswith(_CPU_WRAPPERS):
                    busy[event.name] += event.duration_ns
    total = sum(busy.values()) or 1
    return {"traced_s": round(wall, 3), "busy_s": round(total / 1e9, 3),
            "top_ops": [{"name": name[:120], "ms": round(ns / 1e6, 2),
                         "share": round(ns / total, 3)} for name, ns in busy.most_common(top)]}


def serve_torch(spec: dict) -> None:
    """One torchvision detector in this process, on synthetic batches (see the module
    docstring), then the driver's commands."""
    import numpy as np
    import torch
    from torchvision.models import detection

    gpu = spec["platform"] == "gpu"
    device = torch.device("cuda" if gpu else "cpu")
    torch.manual_seed(0)
    size = spec["size"]
    kwargs = {"min_size": size, "max_size": size} if spec["peer"] in _SIZED_PEERS else {}
    model = getattr(detection, spec["peer"])(weights=None, weights_backbone=None,
                                             num_classes=91, **kwargs).to(device)
    if gpu:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    rng = np.random.default_rng(0)
    images, targets = [], []
    for _ in range(spec["batch"]):
        images.append(torch.rand(3, size, size, device=device))
        n = int(rng.integers(1, 9))
        corner = rng.uniform(0, 0.7, (n, 2))
        yxyx = np.concatenate([corner, corner + rng.uniform(0.05, 0.3, (n, 2))], 1)
        targets.append({"boxes": torch.tensor(yxyx[:, [1, 0, 3, 2]] * size, dtype=torch.float32,
                                               device=device),
                        "labels": torch.tensor(rng.integers(1, 91, n), device=device)})

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=gpu):
            loss = sum(model(images, targets).values())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def run(steps: int) -> float:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        if gpu:
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    first = run(1)
    run(spec["warmup"])
    _reply({"ready": {"first_step_s": round(first, 3)}})
    for command in _commands():
        if "run" in command:
            _reply({"seconds": run(command["steps"])})
        else:
            _reply({"peak_memory_bytes": torch.cuda.max_memory_allocated() if gpu else None})
            return


# --------------------------------------------------------------------------- the driver


class Worker:
    """A worker process of this module (``--serve``), spoken to by JSON lines."""

    def __init__(self, kind: str, spec: dict, env: dict):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.gpu_check", "--serve", kind, json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
            cwd=common.ROOT)
        self.first: dict | None = None

    def started(self) -> dict:
        """Its first message, waited for once: a jaxdet worker's ``compiled`` (its start-up
        up to the compiled step), a torch worker's ``ready``."""
        if self.first is None:
            self.first = self.ask()
        return self.first

    def ask(self, command: dict | None = None) -> dict:
        if command is not None:
            self.process.stdin.write(json.dumps(command) + "\n")
            self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"a worker stopped (exit code {self.process.wait()}); its "
                               "error is above")
        return json.loads(line)

    def close(self) -> dict:
        """Its last report (peak memory), and the process ended; {} if it had stopped."""
        try:
            return self.ask({"quit": True}) if self.process.poll() is None else {}
        except (RuntimeError, BrokenPipeError):
            return {}
        finally:
            if self.process.stdin:
                self.process.stdin.close()
            self.process.wait(timeout=120)


def real_photo_records(folder: Path, records: int) -> tuple[str, str]:
    """A TFRecord of ``records`` tf.Examples made from the ducky photos that ship with jaxdet
    (real JPEGs with their boxes, each copy under its own image id), and its label map."""
    import jaxdet
    from jaxdet.config.label_map import write_label_map
    from jaxdet.data.boxes_json import BoxesJsonSource
    from jaxdet.data.tfrecord import write_tfrecord
    from jaxdet.jobs.convert_dataset import image_format, record_image_bytes, tf_example

    ducky = jaxdet.sample_data("ducky")
    source = BoxesJsonSource(ducky / "boxes.json", ducky / "train", class_name="rubber ducky")
    photos = [(source[i], record_image_bytes(source[i])) for i in range(len(source))]

    def examples():
        for i in range(records):
            record, data = photos[i % len(photos)]
            yield tf_example({**record, "image_id": i + 1}, data,
                             image_format(data, record["image_path"]),
                             list(source.category_names))

    out, label_map = folder / "photos.tfrecord", folder / "label_map.pbtxt"
    write_tfrecord(out, examples())
    write_label_map(label_map, dict(zip(source.category_ids, source.category_names,
                                        strict=True)))
    return str(out), str(label_map)


def start_model(name: str, args, data: tuple[str, str], env: dict) -> tuple[dict, dict]:
    """The worker processes of one model's contenders, started (they build and warm up in
    the background): its result so far and the workers by contender."""
    entry = MODELS[name]
    tiny = args.platform == "cpu" and not args.real_configs
    config = entry["tiny"] if tiny else entry["config"]
    batch = args.batch_size or (2 if args.platform == "cpu" else entry["batch"])
    overrides = [f"train.batch_size={batch}", f"data.worker_count={args.workers}",
                 "data.train=" + json.dumps({"type": "tfrecord", "input_path": [data[0]],
                                             "label_map_path": data[1]}),
                 f"precision={'fp32' if tiny else 'bf16'}", *args.overrides]
    from jaxdet.config.input_size import input_size
    from jaxdet.config.loader import load_config

    size = input_size(load_config(config, overrides).data)[0]
    result: dict = {"config": config, "batch_size": batch, "input_size": size}
    workers = {"jaxdet": Worker("jaxdet", {"config": config, "overrides": overrides,
                                           "warmup": args.warmup}, env)}
    try:
        import torch  # noqa: F401  (the driver only checks it is there)
        import torchvision  # noqa: F401
        torch_missing = None
    except ImportError as error:
        torch_missing = f"torch / torchvision not installed ({error})"
    for peer in entry["peers"]:
        if torch_missing:
            result.setdefault("torchvision", {})[peer] = {"skipped": torch_missing}
            continue
        workers[peer] = Worker("torch", {"peer": peer, "batch": batch, "size": size,
                                         "platform": args.platform, "warmup": args.warmup}, env)
    return result, workers


def measure_model(result: dict, workers: dict, args) -> dict:
    """The started contenders of one model by turns (module docstring), then closed: the
    model's figures (``error`` instead if a worker failed: the other models still run)."""
    batch = result["batch_size"]
    try:
        ready = {key: worker.started() for key, worker in workers.items()}
        device = ready["jaxdet"]["device"]
        ready["jaxdet"] = workers["jaxdet"].ask({"start_loader": True})
        turns = {"jaxdet_fixed": lambda: workers["jaxdet"].ask(
                     {"run": "fixed", "steps": args.steps})["seconds"],
                 "jaxdet_loader": lambda: workers["jaxdet"].ask(
                     {"run": "loader", "steps": args.steps})["seconds"]}
        turns.update({peer: (lambda w=w: w.ask({"run": True, "steps": args.steps})["seconds"])
                      for peer, w in workers.items() if peer != "jaxdet"})
        seconds = common.by_turns(turns, args.rounds)
        if args.profile_steps:
            result["profile"] = workers["jaxdet"].ask({"profile": args.profile_steps})["profile"]
    except RuntimeError as error:
        result["error"] = str(error)
        return result
    finally:
        closed = {key: worker.close() for key, worker in workers.items()}

    def rate(key: str) -> float:
        return batch * args.steps / common.median(seconds[key])

    def shown(images_per_second: float) -> float:  # a CPU run's are below 1 img/s
        return round(images_per_second, 1 if images_per_second >= 100 else 3)

    result["device"] = device
    result["jaxdet"] = {
        "startup": ready["jaxdet"]["ready"], "loader_workers": ready["jaxdet"]["workers"],
        "fixed_images_per_second": shown(rate("jaxdet_fixed")),
        "loader_images_per_second": shown(rate("jaxdet_loader")),
        "loader_over_fixed": round(rate("jaxdet_loader") / rate("jaxdet_fixed"), 3),
        "peak_memory_bytes": closed["jaxdet"].get("peak_memory_bytes"),
        "rounds_s": {k: [round(s, 4) for s in seconds[k]] for k in ("jaxdet_fixed",
                                                                      "jaxdet_loader")}}
    for peer in workers:
        if peer != "jaxdet":
            result.setdefault("torchvision", {})[peer] = {
                "images_per_second": shown(rate(peer)),
                "jaxdet_over_torchvision": round(rate("jaxdet_fixed") / rate(peer), 3),
                "first_step_s": ready[peer]["ready"]["first_step_s"],
                "peak_memory_bytes": closed[peer].get("peak_memory_bytes"),
                "rounds_s": [round(s, 4) for s in seconds[peer]]}
    return result


def targets(models: dict) -> dict:
    """Each bar of the module docstring that this run measured: the figure, the bar, met."""
    out = {}
    for name, bar in TARGETS.items():
        peers = models.get(name, {}).get("torchvision", {})
        ratios = [p["jaxdet_over_torchvision"] for p in peers.values() if "images_per_second" in p]
        if ratios:
            out[f"{name}: jaxdet / torchvision >= {bar}"] = {"figure": min(ratios),
                                                             "met": min(ratios) >= bar}
    d0 = models.get("efficientdet_d0_512", {}).get("jaxdet")
    if d0:
        figure = d0["fixed_images_per_second"]
        out[f"efficientdet_d0_512: >= {D0_IMAGES_PER_SECOND} img/s"] = {
            "figure": figure, "met": figure >= D0_IMAGES_PER_SECOND}
    for name, model in models.items():
        if "jaxdet" in model:
            share = model["jaxdet"]["loader_over_fixed"]
            out[f"{name}: loader / fixed >= {LOADER_SHARE}"] = {"figure": share,
                                                                 "met": share >= LOADER_SHARE}
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--batch-size", type=int, default=None,
                        help="for every model (default: MODELS' own; 2 on the CPU)")
    parser.add_argument("--workers", type=int, default=None,
                        help="loader worker processes (default: 12; 1 on the CPU)")
    parser.add_argument("--records", type=int, default=None,
                        help="records in the photo TFRecord (default 512; 16 on the CPU)")
    parser.add_argument("--rounds", type=int, default=None, help="default 3; 1 on the CPU")
    parser.add_argument("--steps", type=int, default=None, help="default 20; 2 on the CPU")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--profile-steps", type=int, default=5, help="0: no profile")
    parser.add_argument("--deadline-s", type=float, default=400,
                        help="start no further model once this many seconds have passed")
    parser.add_argument("--real-configs", action="store_true",
                        help="on the CPU, the GPU's configs in bf16 (batch 2) instead of the "
                             "tiny stand-ins: a rehearsal of what the GPU compiles")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--serve", nargs=2, metavar=("KIND", "SPEC"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        kind, spec = args.serve
        (serve_jaxdet if kind == "jaxdet" else serve_torch)(json.loads(spec))
        return {}
    tiny = args.platform == "cpu"
    for name, gpu_default, cpu_default in (("workers", 12, 1), ("records", 512, 16),
                                           ("rounds", 3, 1), ("steps", 20, 2)):
        if getattr(args, name) is None:
            setattr(args, name, cpu_default if tiny else gpu_default)

    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")  # processes share the GPU
    if tiny:
        env["JAX_PLATFORMS"] = "cpu"
    started = time.perf_counter()
    result: dict = {"benchmark": "gpu_check", "platform": args.platform, "rounds": args.rounds,
                    "steps": args.steps, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        data = real_photo_records(Path(tmp), args.records)
        # on a GPU every model's workers start at once (their compiles overlap on the host's
        # cores); on a CPU one model at a time
        started_models = ({name: start_model(name, args, data, env) for name in args.models}
                          if not tiny else {})
        for _, workers in started_models.values():  # every step compiled before any timing
            for worker in workers.values():
                try:
                    worker.started()
                except RuntimeError:
                    pass  # measure_model reports it
        for name in args.models:
            if time.perf_counter() - started > args.deadline_s:
                for worker in started_models.get(name, ({}, {}))[1].values():
                    worker.close()
                result["models"][name] = {"skipped": f"past --deadline-s {args.deadline_s:g}"}
                continue
            print(f"gpu_check: {name} ...", file=sys.stderr, flush=True)
            model, workers = started_models.get(name) or start_model(name, args, data, env)
            result["models"][name] = measure_model(model, workers, args)
    result["targets"] = targets(result["models"])
    result["wall_s"] = round(time.perf_counter() - started, 1)
    result["machine"] = common.machine_info(devices=False)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
