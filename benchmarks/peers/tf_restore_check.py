"""The way back, checked with TensorFlow: a jaxdet run written as a TF model_dir
(``jaxdet export --format tf_checkpoint``) is restored by the TF OD API's own model, every
model object matched, and TF's detections on a few images equal jaxdet's.

Two halves, one per environment; prints JSON (the second half: the comparison):

    python -m benchmarks.peers.tf_restore_check write --pipeline-config C --workdir RUN --out DIR
    $PEER -m benchmarks.peers.tf_restore_check check --pipeline-config C --out DIR

``write`` (jaxdet's environment): the run's latest checkpoint as ``DIR/ckpt-1`` and
``DIR/checkpoint``, and ``DIR/detections.npz``: a few generated images at the model's input
size and jaxdet's detections of them (the TF OD API's output names). ``check`` (the TF peer):
TF's model built from the pipeline.config (inference mode), ``tf.train.Checkpoint(model=...)``
restored from ``DIR`` with ``assert_existing_objects_matched``, TF's detections of the same
images compared (boxes and scores within ``--atol``, classes equal, over the detections whose
score is at least ``--min-score``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

IMAGES = 3


def write(args: argparse.Namespace) -> dict:
    import jax

    from jaxdet.config.tfod import load_pipeline_config
    from jaxdet.data.build import input_size
    from jaxdet.export.runtimes import predict_as_signature
    from jaxdet.jobs import runs, tf_run
    from jaxdet.jobs.detector import preprocess_images

    config = load_pipeline_config(args.pipeline_config, args.set)
    written = tf_run.write_tf_run(config, args.workdir, args.out)
    height, width = input_size(config.data)
    images = np.random.default_rng(0).integers(0, 256, (IMAGES, height, width, 3), np.uint8)
    task, state, step = runs.load_for_inference(config, args.workdir)
    params, stats = state["params"], state["batch_stats"]  # the weights written, not the EMA
    x, info = preprocess_images(config, images)
    det = jax.device_get(jax.jit(task.predict)(params, stats, x, info))
    ids = np.arange(1, config.model.num_classes + 1)  # TF's label ids: class + 1
    out = predict_as_signature(det, (height, width), ids)
    np.savez(Path(args.out) / "detections.npz", images=images,
             boxes=out["detection_boxes"], scores=out["detection_scores"],
             classes=out["detection_classes"].astype(int) - 1)
    return {"written": written.line(), "step": step}


def check(args: argparse.Namespace) -> dict:
    import tensorflow as tf
    from object_detection.builders import model_builder
    from object_detection.utils import config_util

    configs = config_util.get_configs_from_pipeline_file(args.pipeline_config)
    model = model_builder.build(configs["model"], is_training=False)
    saved = np.load(Path(args.out) / "detections.npz")
    images = tf.constant(saved["images"], tf.float32)
    pre, shapes = model.preprocess(images)
    model.postprocess(model.predict(pre, shapes), shapes)  # the variables exist
    status = tf.train.Checkpoint(model=model).restore(tf.train.latest_checkpoint(args.out))
    status.expect_partial().assert_existing_objects_matched()
    out = model.postprocess(model.predict(pre, shapes), shapes)
    boxes, scores = out["detection_boxes"].numpy(), out["detection_scores"].numpy()
    classes = out["detection_classes"].numpy().astype(int)  # 0-based, as jaxdet's
    worst_box = worst_score = 0.0
    compared = class_mismatches = 0
    for i in range(len(boxes)):
        keep = scores[i] >= args.min_score
        ours = saved["scores"][i] >= args.min_score
        n = int(min(keep.sum(), ours.sum()))
        compared += n
        worst_box = max(worst_box, float(np.abs(boxes[i][:n] - saved["boxes"][i][:n]).max(
            initial=0.0)))
        worst_score = max(worst_score, float(np.abs(scores[i][:n] - saved["scores"][i][:n]).max(
            initial=0.0)))
        class_mismatches += int((classes[i][:n] != saved["classes"][i][:n]).sum())
    return {"tensorflow": tf.__version__, "restored": "every model object matched",
            "detections_compared": compared, "class_mismatches": class_mismatches,
            "max_box_difference": worst_box, "max_score_difference": worst_score,
            "equal": class_mismatches == 0 and worst_box <= args.atol
            and worst_score <= args.atol}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("half", choices=("write", "check"))
    parser.add_argument("--pipeline-config", required=True)
    parser.add_argument("--workdir", help="the jaxdet run (write)")
    parser.add_argument("--out", required=True, help="the TF model_dir written / checked")
    parser.add_argument("--set", action="append", default=[], help="jaxdet overrides (write)")
    parser.add_argument("--atol", type=float, default=1e-4)
    parser.add_argument("--min-score", type=float, default=0.05)
    args = parser.parse_args()
    print(json.dumps(write(args) if args.half == "write" else check(args), indent=1))


if __name__ == "__main__":
    main()
