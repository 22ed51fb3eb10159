"""The training input pipeline's speed, memory and bytes per batch, against the TF OD API's.

    CONFIGS=../shared/data/tfod/configs
    python -m benchmarks.input.pipeline \\
        --pipeline-config $CONFIGS/ssd_resnet50_v1_fpn_640x640_coco17_tpu-8.config \\
        --tfrecord ../shared/data/tfod/pets_examples.record --records 260 \\
        --label-map ../shared/data/tfod/label_maps/pet_label_map.pbtxt --num-classes 37 \\
        --workers 0 1 2 --peer tf --rounds 3
    python -m benchmarks.input.pipeline --config shapes_demo          # generated data

What is timed is ``data.build.build_train_loader`` as ``jaxdet train`` builds it (the config's
augmentations and resizer, uint8 images, its JPEG decode mode), ``--batches`` batches after
``--warmup`` (at least two per worker process, so every worker has started), for each
``data.worker_count`` in ``--workers``, each in a fresh process pinned to ``--cores`` CPUs (all
of them by default; grain's worker processes inherit the pinning, so every process and thread
of the loader counts against those cores). The normalization that moved into the jitted step is
timed with it: ``images_per_second`` is the rate of a loop that takes each batch from the
loader and runs the jitted ``PixelNormalizer`` on it on this machine's CPU (sent to the device,
normalized, waited for: what a train step adds), with the allocator ``jaxdet train`` uses, while
the loader's threads and processes go on preparing the next batches;
``loader_images_per_second`` is the loader alone over as many batches after it.

Data: ``--tfrecord`` files (repeated, record by record, up to ``--records``), ``--coco``
annotations with ``--images``, or generated shapes (``--generate N`` JPEGs of
``--image-size``; the default). The peer reads the same records (COCO and generated data are
converted to one TFRecord first).

Per measurement: images/s, per core (``images_per_core_second``: images over the CPU seconds
all the loader's processes used; ``main_process_ms_per_image``: the main process's share, which
caps one loader's rate however many worker processes feed it), peak resident memory of the main
process and of each worker process, and the bytes of one batch as sent to the device
(``bytes_per_batch``) next to what the same batch weighs with float32 images
(``float32_bytes_per_batch``). With ``workers`` 0, ``serial_profile`` splits one thread's
milliseconds per image into JPEG decoding and resampling (native code, GIL released), the rest
of the per-sample Python (GIL held) and the batch assembly: what bounds how far the loader's
threads scale with more cores.

``--peer tf`` runs the TF OD API's own input pipeline (``object_detection.inputs.train_input``
through ``benchmarks.peers.tfod_input``) on the same pipeline.config and records, pinned to
the same cores, under the TF peer's Python (``--tf-python``, default ``$TFPY`` or
``~/tfod-peer/tfod-venv/bin/python``; sources: ``--tfod-src``, default ``~/tfod-peer/tfod-src``;
built by ``../shared/peer/setup_tfod.sh``). With ``--rounds R`` the two run by turns, R rounds
(TF, then each worker count); each round's ratio is jaxdet's best worker count over TF, and the
median ratio is reported. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path

from benchmarks import common


def _pin(cores: int | None) -> list[int]:
    """Pins this process (and the processes it starts) to the first ``cores`` CPUs it may use;
    returns the CPUs it runs on."""
    allowed = sorted(os.sched_getaffinity(0))
    if cores:
        if cores > len(allowed):
            raise SystemExit(f"--cores {cores}: only {len(allowed)} CPUs are available")
        os.sched_setaffinity(0, allowed[:cores])
    return sorted(os.sched_getaffinity(0))


class _Memory:
    """Peak resident memory of this process and of each of its child processes, sampled."""

    def __init__(self, every_s: float = 0.05):
        import psutil

        self._me = psutil.Process()
        self.peak_main = 0
        self.peak_children: dict[int, int] = {}
        self._stop = threading.Event()
        self._every = every_s
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            try:
                self.peak_main = max(self.peak_main, self._me.memory_info().rss)
                for child in self._me.children(recursive=True):
                    rss = child.memory_info().rss
                    self.peak_children[child.pid] = max(self.peak_children.get(child.pid, 0), rss)
            except psutil.Error:
                pass
            self._stop.wait(self._every)

    def __enter__(self) -> _Memory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _cpu_seconds() -> tuple[float, float]:
    """User + system CPU seconds of this process and its live children, and of this process
    alone."""
    import psutil

    me = psutil.Process()
    mine = total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total, mine


def _config(args, records: list[str], workers: int | None):
    """The config to time: the pipeline.config or jaxdet config, reading ``records``, with
    ``data.worker_count=workers`` (None: the config's own)."""
    overrides = [f"train.batch_size={args.batch_size}", *args.overrides]
    if workers is not None:
        overrides.append(f"data.worker_count={workers}")
    if args.num_classes:
        overrides.append(f"model.num_classes={args.num_classes}")
    if args.coco:
        train = {"type": "coco", "annotation_file": args.coco, "image_dir": args.images}
    else:
        train = {"type": "tfrecord", "input_path": records}
        if args.label_map:
            train["label_map_path"] = args.label_map
    overrides.append("data.train=" + json.dumps(train))
    if args.pipeline_config:
        from jaxdet.config.tfod import load_pipeline_config

        return load_pipeline_config(args.pipeline_config, overrides)
    from jaxdet.config.loader import load_config

    return load_config(args.config, overrides)


def _device_normalizer(config):
    """The jitted ``PixelNormalizer`` as the train step runs it, as ``batch -> None`` (the
    batch's images and image_info sent to the device, normalized, waited for), or None for
    data that are not images."""
    import jax

    from jaxdet import tasks

    normalizer = tasks.build_normalizer(config)
    if normalizer is None:
        return None
    fn = jax.jit(normalizer)

    def run(batch) -> None:
        fn(jax.device_put(batch["images"]), jax.device_put(batch["image_info"])
           ).block_until_ready()
    return run


def serial_profile(config, source, samples: int = 64) -> dict:
    """Milliseconds per image of the per-sample pipeline run in one thread: JPEG decoding and
    resampling (native code that releases the GIL) and the rest (Python holding the GIL),
    plus the batch assembly in the main process (``collate``, per image)."""
    import numpy as np

    from jaxdet import tasks
    from jaxdet.data import build as data_build
    from jaxdet.data import decode, loader, resample, sample_pipeline

    spent = {"decode": 0.0, "resample": 0.0}

    def timed(name, fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t0
        return wrapper

    originals = (decode._simplejpeg, resample.resample)
    decode._simplejpeg = timed("decode", decode._simplejpeg)
    resample.resample = timed("resample", resample.resample)
    try:
        pipeline = sample_pipeline._Pipeline(
            source, tuple(tasks.transforms_of(config, training=True, normalize=False)),
            config.data.max_number_of_boxes, config.data.train_image_dtype,
            data_build.decode_mode(config))
        for i in range(8):  # warm-up
            pipeline.process(i % len(source), np.random.default_rng(i))
        spent.update(decode=0.0, resample=0.0)
        out = []
        t0 = time.perf_counter()
        for i in range(samples):  # the last 8 kept: memory stays as in the loader
            out = [*out[-7:], pipeline.process(i % len(source), np.random.default_rng(i))]
        total = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(8):
            loader._collate(out)
        collate = (time.perf_counter() - t0) / 8
    finally:
        decode._simplejpeg, resample.resample = originals
    ms = {k: 1000 * v / samples for k, v in spent.items()}
    return {"total_ms": round(1000 * total / samples, 3), "decode_ms": round(ms["decode"], 3),
            "resample_ms": round(ms["resample"], 3),
            "python_ms": round(1000 * total / samples - ms["decode"] - ms["resample"], 3),
            "collate_ms": round(1000 * collate / len(out), 3)}


def warmup_batches(warmup: int, workers: int) -> int:
    """Batches taken before timing: ``warmup``, and at least two from every worker process
    (each makes whole batches; the first ones wait for its start-up)."""
    return max(warmup, 2 * workers)


def measure_once(args, records: list[str], workers: int) -> dict:
    """One measurement in this (pinned) process: see the module docstring."""
    from jaxdet.data import build as data_build

    config = _config(args, records, workers)
    source = data_build.build_source(config.data.train, num_classes=config.model.num_classes,
                                   field="data.train")
    # first, while no other thread of this process runs
    profile = serial_profile(config, source) if workers == 0 else None
    normalize = _device_normalizer(config)
    with _Memory() as memory:
        loader = data_build.build_train_loader(config, source)
        try:
            t0 = time.perf_counter()
            for _ in range(warmup_batches(args.warmup, workers)):
                batch = next(loader)
                if normalize is not None:
                    normalize(batch)  # compiled here
            startup = time.perf_counter() - t0
            # the loader's batches normalized on the device as they come, as a train step
            # would take them (the loader's threads and processes keep working meanwhile)
            t0, spent = time.perf_counter(), []
            for _ in range(args.batches):
                batch = next(loader)
                if normalize is not None:
                    t1 = time.perf_counter()
                    normalize(batch)
                    spent.append(time.perf_counter() - t1)
            with_normalize = time.perf_counter() - t0
            # the loader alone
            (cpu0, main0), t0 = _cpu_seconds(), time.perf_counter()
            for _ in range(args.batches):
                batch = next(loader)
            seconds = time.perf_counter() - t0
            cpu1, main1 = _cpu_seconds()
            cpu, main_cpu = cpu1 - cpu0, main1 - main0
        finally:
            loader.close()
    arrays = {k: v for k, v in batch.items() if hasattr(v, "nbytes")}
    nbytes = sum(int(v.nbytes) for v in arrays.values())
    images = batch["images"]
    as_float = nbytes - int(images.nbytes) + int(images.size) * 4
    n = args.batches * args.batch_size
    return {
        "workers": workers,
        "images_per_second": round(n / with_normalize, 1),
        "loader_images_per_second": round(n / seconds, 1),
        "normalize_ms_per_batch": round(1000 * common.median(spent), 2) if spent else 0.0,
        "images_per_core_second": round(n / cpu, 1) if cpu > 0 else None,
        "cpu_seconds": round(cpu, 2),
        # the main process's share: with worker processes, what caps one loader's rate
        "main_process_ms_per_image": round(1000 * main_cpu / n, 3),
        "warmup_batches": warmup_batches(args.warmup, workers),
        "warmup_seconds": round(startup, 2),
        "peak_rss_mb": round(memory.peak_main / 2**20, 1),
        "worker_peak_rss_mb": sorted(round(v / 2**20, 1) for v in memory.peak_children.values()),
        "image_dtype": str(images.dtype),
        "bytes_per_batch": nbytes,
        "float32_bytes_per_batch": as_float,
        "batch_shapes": {k: list(v.shape) for k, v in arrays.items()},
        "jpeg_decode": data_build.decode_mode(config),
        "serial_profile": profile,
    }


# --------------------------------------------------------------------------- data


def _prepare_records(args, tmp: Path) -> list[str]:
    """The TFRecord files both sides read (see the module docstring)."""
    from jaxdet.data.tfrecord import iter_tfrecord, write_tfrecord

    if args.tfrecord:
        if not args.records:
            return list(args.tfrecord)
        raw = [data for path in args.tfrecord for _, data in iter_tfrecord(path)]
        out = tmp / "records.tfrecord"
        write_tfrecord(out, (raw[i % len(raw)] for i in range(args.records)))
        return [str(out)]
    from jaxdet.data.coco import CocoSource
    from jaxdet.jobs.convert_dataset import source_to_tfrecord

    if args.coco:
        source = CocoSource(args.coco, args.images)
    else:
        from jaxdet.data.shapes import generate_shapes

        ann = generate_shapes(tmp / "shapes", args.generate, image_size=tuple(args.image_size),
                              seed=0, num_classes=args.num_classes or 3)
        source = CocoSource(ann, Path(ann).parent / "images")
        args.coco, args.images = str(ann), str(Path(ann).parent / "images")
    out = tmp / "records.tfrecord"
    source_to_tfrecord(source, out, label_map_out=tmp / "label_map.pbtxt", progress=False)
    if not args.label_map:
        args.label_map = str(tmp / "label_map.pbtxt")
    return [str(out)]


# --------------------------------------------------------------------------- runs


def _child(args, records: list[str], workers: int) -> dict:
    """One measurement in a fresh process (this module with ``--measure-one``)."""
    return common.run_json(common.module_command(__spec__.name, "--measure-one", json.dumps({
        "args": vars(args), "records": records, "workers": workers})),
        common.with_root_on_path(os.environ), what=f"the measurement of {workers} workers")


def _peer(args, records: list[str]) -> dict:
    python, env = common.tf_peer(args)
    cmd = common.peer_command(
        python, "tfod_input", "--pipeline-config", args.pipeline_config,
        "--tfrecord", *records, "--label-map", args.label_map,
        "--num-classes", str(args.num_classes), "--batch-size", str(args.batch_size),
        "--warmup", str(args.warmup), "--batches", str(args.batches))
    if args.cores:
        cmd = ["taskset", "-c", ",".join(str(c) for c in _pin(None)[:args.cores]), *cmd]
    return common.run_json(cmd, env, what="the TF OD API's input pipeline")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--pipeline-config", help="a TF OD API pipeline.config")
    which.add_argument("--config", default=None, help="a jaxdet config (default shapes_demo)")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--tfrecord", nargs="+", help="TFRecord files of tf.train.Example")
    parser.add_argument("--records", type=int, default=0,
                        help="repeat the TFRecord's records up to this many (0: as they are)")
    parser.add_argument("--coco", help="COCO annotation JSON (with --images)")
    parser.add_argument("--images", help="the COCO images' folder")
    parser.add_argument("--generate", type=int, default=256,
                        help="generated shapes: how many JPEGs (without --tfrecord/--coco)")
    parser.add_argument("--image-size", type=int, nargs=2, default=[480, 640])
    parser.add_argument("--label-map")
    parser.add_argument("--num-classes", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--cores", type=int, default=0, help="pin to this many CPUs (0: all)")
    parser.add_argument("--peer", choices=["tf"], help="also time the TF OD API's pipeline")
    parser.add_argument("--rounds", type=int, default=1)
    common.add_tf_peer_arguments(parser)
    parser.add_argument("--measure-one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.measure_one:  # a child: one measurement, pinned
        from jaxdet.backends.process import reexec_with_fast_allocator

        reexec_with_fast_allocator()  # as the jaxdet command runs (XLA's buffers kept mapped)
        spec = json.loads(args.measure_one)
        child_args = argparse.Namespace(**spec["args"])
        _pin(child_args.cores)
        print(json.dumps(measure_once(child_args, spec["records"], spec["workers"])))
        return {}
    if args.pipeline_config is None and args.config is None:
        args.config = "shapes_demo"
    if args.peer and not args.pipeline_config:
        parser.error("--peer tf needs --pipeline-config (the TF OD API reads pipeline.configs)")
    cpus = _pin(args.cores)
    with tempfile.TemporaryDirectory() as tmp:
        records = _prepare_records(args, Path(tmp))
        sides = {"jaxdet": lambda: [_child(args, records, w) for w in args.workers]}
        if args.peer:
            sides = {"tf": lambda: _peer(args, records), **sides}
        runs = common.by_turns(sides, args.rounds)
    rounds = [{side: runs[side][k] for side in runs} for k in range(args.rounds)]
    for entry in rounds:
        if args.peer:
            best = max(m["images_per_second"] for m in entry["jaxdet"])
            entry["ratio"] = round(best / entry["tf"]["images_per_second"], 3)

    by_workers = {}
    for w in args.workers:
        measured = [m for r in rounds for m in r["jaxdet"] if m["workers"] == w]
        by_workers[str(w)] = {
            "images_per_second_median": common.median(m["images_per_second"] for m in measured),
            "images_per_core_second_median": common.median(
                m["images_per_core_second"] for m in measured),
            "main_process_ms_per_image_median": common.median(
                m["main_process_ms_per_image"] for m in measured),
            "peak_rss_mb": max(m["peak_rss_mb"] for m in measured),
            "worker_peak_rss_mb": max(max(m["worker_peak_rss_mb"], default=0) for m in measured),
        }
    result = {
        "benchmark": "input_pipeline",
        "config": args.pipeline_config or args.config,
        "data": (args.tfrecord and f"{args.tfrecord} x{args.records or 1}") or args.coco
        or f"generated {args.generate} x {args.image_size}",
        "batch_size": args.batch_size,
        "cores": len(cpus),
        "jaxdet": by_workers,
        "rounds": rounds,
        "machine": common.machine_info(),
    }
    if args.peer:
        result["tf_images_per_second_median"] = common.median(
            r["tf"]["images_per_second"] for r in rounds)
        result["ratio_median"] = common.median(r["ratio"] for r in rounds)
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
