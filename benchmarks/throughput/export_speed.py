"""Exported artifacts against jaxdet's own predict, in one run; prints one JSON object.

    python -m benchmarks.throughput.export_speed --configs ssd_mobilenet_v2_320 \
        efficientdet_d0 --batch-sizes 1 16 --iters 5

Per config (initial weights; the speed does not depend on them) and batch size, on uint8
images at the model's input size:

* ``jaxdet_predict``: what ``jaxdet predict`` runs per batch: the host eval transforms
  (normalization, the resizer) and the jitted ``task.predict``;
* ``jaxdet_jit``: the jitted ``task.predict`` alone, on already normalized images;
* ``stablehlo``: the ``jaxdet export`` artifact (``jax.export.deserialize(...).call`` under
  ``jax.jit``), preprocessing inside; its serialized size in MB;
* ``onnx``: the ONNX artifact (a fixed batch per batch size) in ONNX Runtime's CPU provider
  with its default threads (when ``make install-export`` installed it);
* ``saved_model``: the TF SavedModel (any batch) loaded by ``tf.saved_model.load`` and called
  through its ``serving_default`` signature; ``tflite``: the TFLite flatbuffer (a fixed batch)
  in LiteRT's interpreter with 2 threads (both when TensorFlow is installed: run this in
  ``.venv-tf`` from ``make install-tf-export``).

Latency is the median of ``--iters`` calls after a warm-up call; ``ratio`` is
``jaxdet_predict`` time / artifact time (> 1: the artifact is faster).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from benchmarks import common
from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.data import build as data_build
from jaxdet.export.exporter import export_onnx, export_stablehlo
from jaxdet.export.serving import serving_function
from jaxdet.export.tf_formats import tflite_bytes, write_saved_model
from jaxdet.jobs.detector import preprocess_images


def _onnx_session(fn, size, batch: int):
    """(ONNX Runtime session, model bytes) of the serving function, or None without
    onnxruntime / jax2onnx."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    payload, _ = export_onnx(fn, size, batch_size=batch, input_type="image_tensor")
    return ort.InferenceSession(payload, providers=["CPUExecutionProvider"]), len(payload)


def _tf_runners(fn, size, batch: int, tmp: Path) -> list:
    """[(label, call(images), artifact MB)] for the SavedModel and TFLite artifacts, or []
    without TensorFlow."""
    try:
        import tensorflow as tf
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        return []
    path = tmp / "saved_model"  # any batch: written once per config
    if not path.exists():
        write_saved_model(fn, path, size, batch_size=None, input_type="image_tensor")
    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    saved_mb = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6
    payload = tflite_bytes(fn, size, batch_size=batch, input_type="image_tensor")
    runner = Interpreter(model_content=payload, num_threads=2).get_signature_runner(
        "serving_default")
    return [("saved_model", lambda images: {k: v.numpy() for k, v in serve(
                input_tensor=tf.constant(images)).items()}, saved_mb),
            ("tflite", lambda images: runner(input_tensor=images), len(payload) / 1e6)]


def bench_config(name: str, batch_sizes: list[int], iters: int, overrides: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:  # the TF artifacts, while they run
        return _bench_config(name, batch_sizes, iters, overrides, Path(tmp))


def _bench_config(name: str, batch_sizes: list[int], iters: int, overrides: list[str],
                  tmp: Path) -> dict:
    config = load_config(name, overrides)
    task = tasks.build_task(config)
    params, stats = task.initial_variables()
    ids = list(range(1, config.model.num_classes + 1))
    fn = serving_function(task, config, params, stats, class_ids=ids,
                          pads_raw_pixels=tasks.family(config).pads_raw_pixels)
    size = data_build.input_size(config.data)
    t0 = time.perf_counter()
    payload = export_stablehlo(fn, size).serialize()
    export_s = time.perf_counter() - t0
    artifact = jax.export.deserialize(payload)
    call = jax.jit(artifact.call)
    predict = jax.jit(task.predict)
    rows = []
    for b in batch_sizes:
        images = common.random_photos(np.random.default_rng(0), b, size)
        x, info = preprocess_images(config, images)

        def ours(images=images):
            xx, ii = preprocess_images(config, images)
            jax.block_until_ready(predict(params, stats, xx, ii))

        def ours_jit(x=x, info=info):
            jax.block_until_ready(predict(params, stats, x, info))

        def exported(images=images):
            jax.block_until_ready(call(images))

        runners = [("jaxdet_predict", ours), ("jaxdet_jit", ours_jit), ("stablehlo", exported)]
        row = {"batch_size": b}
        session = _onnx_session(fn, size, b)
        if session is not None:
            row["onnx_mb"] = round(session[1] / 1e6, 2)
            runners.append(("onnx", lambda images=images, s=session[0]: s.run(
                None, {"image_tensor": images})))
        for label, tf_call, mb in _tf_runners(fn, size, b, tmp):
            row[f"{label}_mb"] = round(mb, 2)
            runners.append((label, lambda images=images, tf_call=tf_call: tf_call(images)))
        for label, f in runners:
            f()  # compile / warm up
            row[label] = common.latency(common.timed_calls(f, iters), b)
            if label not in ("jaxdet_predict", "jaxdet_jit"):
                row[f"ratio_{label}"] = round(row["jaxdet_predict"]["latency_ms"]
                                              / row[label]["latency_ms"], 3)
        rows.append(row)
    return {"config": name, "input_size": list(size), "export_s": round(export_s, 1),
            "stablehlo_mb": round(len(payload) / 1e6, 2), "results": rows}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+",
                        default=["ssd_mobilenet_v2_320", "efficientdet_d0"])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--set", dest="overrides", action="append",
                        default=["precision=fp32"])
    args = parser.parse_args(argv)
    result = {"benchmark": "export_speed",
              "models": [bench_config(n, args.batch_sizes, args.iters, args.overrides)
                         for n in args.configs],
              **common.machine_info()}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
