"""The TF Object Detection API's own train step and inference on synthetic batches; prints one
JSON object. Runs under the TF peer's Python (``../shared/peer/setup_tfod.sh``), not jaxdet's,
from the repository's root, usually by ``benchmarks.throughput.vs_tfod``:

    TF_USE_LEGACY_KERAS=1 PYTHONPATH=~/tfod-peer/tfod-src ~/tfod-peer/tfod-venv/bin/python \\
        -m benchmarks.peers.tfod_timing --pipeline-config ssd_mobilenet_v2_320x320.config \\
        --train-batch-size 8 --infer-batch-sizes 1 8 --steps 4

The model is ``model_builder.build`` of the config (fp32, random weights). The train step is
``model_lib_v2.eager_train_step`` inside one ``tf.function`` (what ``model_main_tf2.py``
runs), momentum SGD 0.9, on random-normal images with 1..``--max-boxes`` random boxes each
(one-hot classes, padded to ``--max-boxes``, unpadded by TF). Inference is ``preprocess`` +
``predict`` + ``postprocess`` (NMS included) in one ``tf.function`` on random uint8 images of
the config's input size. The first call of each (tracing) is timed apart, ``--warmup`` more
are run untimed; the figure is the mean of ``--steps`` / ``--calls`` calls after them.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import tensorflow as tf
from object_detection.builders import model_builder
from object_detection.core import standard_fields as fields
from object_detection.model_lib_v2 import eager_train_step
from object_detection.utils import config_util


def _input_size(model_config) -> tuple[int, int]:
    arch = model_config.WhichOneof("model")
    resizer = getattr(model_config, arch).image_resizer
    kind = resizer.WhichOneof("image_resizer_oneof")
    r = getattr(resizer, kind)
    if kind == "fixed_shape_resizer":
        return r.height, r.width
    return r.max_dimension, r.max_dimension


def _synthetic_labels(rng, batch: int, max_boxes: int, num_classes: int) -> dict:
    boxes = np.zeros((batch, max_boxes, 4), np.float32)
    classes = np.zeros((batch, max_boxes, num_classes), np.float32)
    counts = rng.integers(1, max_boxes + 1, batch)
    for b, n in enumerate(counts):
        lo = rng.uniform(0.0, 0.7, (n, 2))
        size = rng.uniform(0.05, 0.3, (n, 2))
        boxes[b, :n] = np.concatenate([lo, np.minimum(lo + size, 1.0)], axis=1)
        classes[b, np.arange(n), rng.integers(0, num_classes, n)] = 1.0
    weights = (np.arange(max_boxes)[None] < counts[:, None]).astype(np.float32)
    return {fields.InputDataFields.groundtruth_boxes: tf.constant(boxes),
            fields.InputDataFields.groundtruth_classes: tf.constant(classes),
            fields.InputDataFields.groundtruth_weights: tf.constant(weights),
            fields.InputDataFields.num_groundtruth_boxes: tf.constant(counts.astype(np.int32))}


def time_train(model_config, batch: int, steps: int, max_boxes: int, warmup: int = 0) -> dict:
    model = model_builder.build(model_config=model_config, is_training=True)
    h, w = _input_size(model_config)
    num_classes = getattr(model_config, model_config.WhichOneof("model")).num_classes
    rng = np.random.default_rng(0)
    features = {
        fields.InputDataFields.image: tf.constant(
            rng.normal(size=(batch, h, w, 3)).astype(np.float32)),
        fields.InputDataFields.true_image_shape: tf.constant(
            np.tile([h, w, 3], (batch, 1)).astype(np.int32)),
    }
    labels = _synthetic_labels(rng, batch, max_boxes, num_classes)
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.001, momentum=0.9)

    @tf.function
    def step(features, labels):
        return eager_train_step(model, features, labels, unpad_groundtruth_tensors=True,
                                optimizer=optimizer, training_step=tf.constant(0, tf.int64))

    start = time.perf_counter()
    losses = step(features, labels)
    first = time.perf_counter() - start
    for _ in range(warmup):
        losses = step(features, labels)
    float(losses["Loss/total_loss"])
    start = time.perf_counter()
    for _ in range(steps):
        losses = step(features, labels)
    float(losses["Loss/total_loss"])
    seconds = (time.perf_counter() - start) / steps
    return {"batch_size": batch, "step_seconds": seconds, "images_per_second": batch / seconds,
            "first_call_seconds": first}


def time_inference(model_config, batches: list[int], calls: int, warmup: int = 0) -> list[dict]:
    model = model_builder.build(model_config=model_config, is_training=False)
    h, w = _input_size(model_config)

    @tf.function
    def detect(images):
        prepared, shapes = model.preprocess(tf.cast(images, tf.float32))
        return model.postprocess(model.predict(prepared, shapes), shapes)

    rows = []
    for batch in batches:
        images = tf.constant(np.random.default_rng(1).integers(0, 256, (batch, h, w, 3)),
                             tf.uint8)
        start = time.perf_counter()
        out = detect(images)
        first = time.perf_counter() - start
        for _ in range(warmup):
            out = detect(images)
        out["num_detections"].numpy()
        start = time.perf_counter()
        for _ in range(calls):
            out = detect(images)
        out["num_detections"].numpy()
        seconds = (time.perf_counter() - start) / calls
        rows.append({"batch_size": batch, "seconds": seconds,
                     "images_per_second": batch / seconds, "first_call_seconds": first})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline-config", required=True)
    parser.add_argument("--train-batch-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--max-boxes", type=int, default=16)
    parser.add_argument("--infer-batch-sizes", type=int, nargs="*", default=[1, 8])
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=0,
                        help="untimed calls after the first, before timing")
    args = parser.parse_args()
    configs = config_util.get_configs_from_pipeline_file(args.pipeline_config)
    model_config = configs["model"]
    out = {"pipeline_config": os.path.basename(args.pipeline_config),
           "tensorflow": tf.__version__, "threads": {
               "intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
               "inter_op": tf.config.threading.get_inter_op_parallelism_threads()}}
    if args.train_batch_size:
        out["train"] = time_train(model_config, args.train_batch_size, args.steps,
                                  args.max_boxes, args.warmup)
    if args.infer_batch_sizes:
        out["inference"] = time_inference(model_config, args.infer_batch_sizes, args.calls,
                                          args.warmup)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
