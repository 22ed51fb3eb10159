"""The way back, checked with TensorFlow: a jaxdet run written as a TF model_dir (by
``benchmarks.accuracy.tf_way_back``, which ``jaxdet export --format tf_checkpoint`` writes
too) is restored by the TF OD API's own model, every model object matched, and TF's detections
of the images jaxdet saved beside it equal jaxdet's. Runs in the TF peer; prints JSON.

    python -m benchmarks.accuracy.tf_way_back --pipeline-config C --workdir RUN --out DIR
    $PEER -m benchmarks.peers.tf_restore_check --pipeline-config C --out DIR

TF's model is built from the pipeline.config (inference mode), ``tf.train.Checkpoint(model=...)``
restored from ``DIR`` with ``assert_existing_objects_matched``; boxes and scores are compared
within ``--atol``, classes exactly, over the detections scoring at least ``--min-score``, in
order and as a set (two detections whose scores tie within float32 rounding may come in either
order: equal means every TF detection has one of jaxdet's within ``--atol``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


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
    compared = class_mismatches = unmatched = 0
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
        for k in range(n):  # as a set: two detections whose scores tie may come in either order
            same = ((np.abs(saved["scores"][i][:n] - scores[i][k]) <= args.atol)
                    & (saved["classes"][i][:n] == classes[i][k])
                    & (np.abs(saved["boxes"][i][:n] - boxes[i][k]).max(-1) <= args.atol))
            unmatched += int(not same.any())
    return {"tensorflow": tf.__version__, "restored": "every model object matched",
            "detections_compared": compared, "class_mismatches": class_mismatches,
            "max_box_difference": worst_box, "max_score_difference": worst_score,
            "unmatched_as_a_set": unmatched,
            "equal": unmatched == 0 and worst_score <= args.atol}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline-config", required=True)
    parser.add_argument("--out", required=True, help="the TF model_dir written by jaxdet")
    parser.add_argument("--atol", type=float, default=1e-4)
    parser.add_argument("--min-score", type=float, default=0.05)
    print(json.dumps(check(parser.parse_args()), indent=1))


if __name__ == "__main__":
    main()
