"""The way back, jaxdet's half: a jaxdet run written as a TF model_dir (what ``jaxdet export
--format tf_checkpoint`` writes) and jaxdet's detections of a few images, for the TF peer's
``benchmarks.peers.tf_restore_check`` to compare with TF's own. Prints JSON.

    python -m benchmarks.accuracy.tf_way_back --pipeline-config C --workdir RUN --out DIR
    $PEER -m benchmarks.peers.tf_restore_check --pipeline-config C --out DIR

Writes ``DIR/ckpt-1`` and ``DIR/checkpoint`` (the run's latest checkpoint) and
``DIR/detections.npz``: ``IMAGES`` generated images at the model's input size and jaxdet's
detections of them with the weights written (not their moving average), as TF's
postprocess gives them (normalized boxes, scores, 0-based classes).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

IMAGES = 3


def write(args: argparse.Namespace) -> dict:
    """Write the model_dir and the detections; returns what was written."""
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline-config", required=True)
    parser.add_argument("--workdir", required=True, help="the jaxdet run")
    parser.add_argument("--out", required=True, help="the TF model_dir to write")
    parser.add_argument("--set", action="append", default=[], help="jaxdet overrides")
    print(json.dumps(write(parser.parse_args()), indent=1))


if __name__ == "__main__":
    main()
