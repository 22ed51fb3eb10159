"""The TF Object Detection API's own training input pipeline, timed; prints one JSON line.

Run under the TF peer's Python (built by ``../shared/peer/setup_tfod.sh``) from the
repository's root, usually by ``benchmarks.input.pipeline --peer tf``:

    TF_USE_LEGACY_KERAS=1 PYTHONPATH=~/tfod-peer/tfod-src ~/tfod-peer/tfod-venv/bin/python \\
        -m benchmarks.peers.tfod_input --pipeline-config CONFIG --tfrecord FILE \\
        --label-map pet_label_map.pbtxt --num-classes 37 --batch-size 8

It builds ``object_detection.inputs.train_input`` from the pipeline.config as
``model_main_tf2.py`` does (the config's own augmentations, the model's own ``preprocess``:
resizer and normalization, padding to the batch), with the input path, label map, class count
and batch size replaced, and reports images per second over ``--batches`` batches after
``--warmup`` batches, plus the process's peak resident memory. ``--threads N`` caps TF's intra-
and inter-op thread pools (0: TF's default, one per core).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time


def configs_for_data(args) -> dict:
    """TF's ``config_util`` configs of ``args.pipeline_config`` with its training input,
    label map, class count and batch size replaced by ``args.tfrecord``, ``.label_map``,
    ``.num_classes`` and ``.batch_size``, as ``model_main_tf2.py``'s overrides do."""
    from object_detection.utils import config_util

    configs = config_util.get_configs_from_pipeline_file(args.pipeline_config)
    return config_util.merge_external_params_with_configs(configs, kwargs_dict={
        "train_input_path": args.tfrecord,
        "label_map_path": args.label_map,
        "num_classes": args.num_classes,
        "batch_size": args.batch_size,
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline-config", required=True)
    parser.add_argument("--tfrecord", required=True, nargs="+")
    parser.add_argument("--label-map", required=True)
    parser.add_argument("--num-classes", type=int, required=True)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()

    import tensorflow as tf
    from object_detection import inputs

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    configs = configs_for_data(args)
    dataset = inputs.train_input(configs["train_config"], configs["train_input_config"],
                                 configs["model"])
    iterator = iter(dataset)
    t0 = time.perf_counter()
    for _ in range(args.warmup):
        features, _ = next(iterator)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(args.batches):
        features, _ = next(iterator)
    seconds = time.perf_counter() - t0
    images = features["image"]
    print(json.dumps({
        "peer": "tfod_train_input",
        "tensorflow": tf.__version__,
        "pipeline_config": os.path.basename(args.pipeline_config),
        "batch_size": args.batch_size,
        "batches": args.batches,
        "images_per_second": round(args.batches * args.batch_size / seconds, 1),
        "warmup_seconds": round(first, 2),
        "image_batch": {"shape": list(images.shape), "dtype": images.dtype.name,
                        "bytes": int(images.shape.num_elements() * images.dtype.size)},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "threads": args.threads or os.cpu_count(),
    }))


if __name__ == "__main__":
    main()
