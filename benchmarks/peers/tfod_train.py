"""The TF Object Detection API's own training, as ``model_main_tf2.py`` runs it; for
``benchmarks.throughput.train_vs_tfod`` and ``benchmarks.accuracy.vs_tfod``. Run under the TF
peer's Python (``../shared/peer/setup_tfod.sh``) from the repository's root:

    TF_USE_LEGACY_KERAS=1 PYTHONPATH=~/tfod-peer/tfod-src ~/tfod-peer/tfod-venv/bin/python \\
        -m benchmarks.peers.tfod_train --pipeline-config CONFIG --write-config edited.config \\
        --tfrecord pets.record --label-map pet_label_map.pbtxt --num-classes 37 --batch-size 8
    ... -m benchmarks.peers.tfod_train --pipeline-config edited.config --model-dir D --steps 30

``--write-config``: the pipeline.config with its training input, label map, class count and
batch size replaced, no fine-tune checkpoint unless ``--fine-tune-checkpoint`` names one
(with ``--fine-tune-checkpoint-type``, default ``detection``, and version V2) and
``use_bfloat16: false`` (fp32 on both sides), written with TF's own ``config_util`` so both
frameworks read the same file. ``--eval-tfrecord`` also replaces the evaluation input;
``--num-steps``, ``--learning-rate-base``, ``--warmup-learning-rate`` and ``--warmup-steps``
edit ``num_steps`` and a cosine schedule as a tutorial would (``total_steps`` follows
``num_steps``); ``--image-size N`` sets the image resizer to N (a fixed-shape resizer's height
and width, a keep-aspect-ratio one's both dimensions); ``--keep-bfloat16`` leaves
``use_bfloat16`` as the file has it (TF applies it on TPUs only).

Otherwise: ``model_lib_v2.train_loop`` (what ``model_main_tf2.py`` calls) for ``--steps``
steps into ``--model-dir``, checkpointing at step 0 and after the last step, and prints one
JSON line: the seconds it took, and the per-step time TF logs every 100 steps
(``model_lib_v2`` runs steps 100 at a time in one ``tf.function``: the time of each block of
100 over 100; the first block includes tracing). ``--seed`` seeds TF's initializers and
augmentations (``tf.keras.utils.set_random_seed``).

``--evaluate CHECKPOINT``: TF's own evaluation of one checkpoint (or a model_dir's latest)
on the config's evaluation input (``model_lib_v2.eager_eval_loop``, what ``model_main_tf2.py
--checkpoint_dir`` runs: the config's ``metrics_set``, COCO by default); prints one JSON line
with its metrics.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import time


def write_config(args) -> None:
    from object_detection.protos import train_pb2
    from object_detection.utils import config_util

    from benchmarks.peers.tfod_input import configs_for_data

    configs = configs_for_data(args)
    train = configs["train_config"]
    train.fine_tune_checkpoint = args.fine_tune_checkpoint or ""
    if args.fine_tune_checkpoint:  # TF2 reads V2 (object-based) checkpoints only
        train.fine_tune_checkpoint_type = args.fine_tune_checkpoint_type
        train.fine_tune_checkpoint_version = train_pb2.CheckpointVersion.V2
    if not args.keep_bfloat16:
        train.use_bfloat16 = False
    configs["eval_input_configs"][0].label_map_path = args.label_map
    configs["eval_input_configs"][0].tf_record_input_reader.input_path[:] = (
        args.eval_tfrecord or args.tfrecord)
    if args.num_steps:
        train.num_steps = args.num_steps
    if args.image_size:
        resize_to(configs["model"], args.image_size)
    optimizer = getattr(train.optimizer, train.optimizer.WhichOneof("optimizer"))
    if optimizer.learning_rate.WhichOneof("learning_rate") == "cosine_decay_learning_rate":
        cosine = optimizer.learning_rate.cosine_decay_learning_rate
        cosine.total_steps = train.num_steps
        for name in ("learning_rate_base", "warmup_learning_rate", "warmup_steps"):
            value = getattr(args, name)
            if value is not None:
                setattr(cosine, name, value)
    proto = config_util.create_pipeline_proto_from_configs(configs)
    with open(args.write_config, "w") as f:
        from google.protobuf import text_format

        f.write(text_format.MessageToString(proto))


def resize_to(model_config, size: int) -> None:
    """The model's image resizer set to ``size``: a fixed-shape resizer's height and width, or
    a keep-aspect-ratio resizer's min and max dimensions."""
    arch = getattr(model_config, model_config.WhichOneof("model"))
    resizer = getattr(arch.image_resizer, arch.image_resizer.WhichOneof("image_resizer_oneof"))
    if hasattr(resizer, "height"):
        resizer.height = resizer.width = size
    else:
        resizer.min_dimension = resizer.max_dimension = size


class _StepTimes(logging.Handler):
    """Collects the ``Step N per-step time Xs`` lines of ``model_lib_v2``."""

    def __init__(self):
        super().__init__()
        self.times: dict[int, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        match = re.match(r"Step (\d+) per-step time ([0-9.]+)s", record.getMessage())
        if match:
            self.times[int(match[1])] = float(match[2])


def train(args) -> dict:
    t0 = time.perf_counter()
    import tensorflow as tf
    from object_detection import model_lib_v2

    if args.seed is not None:
        tf.keras.utils.set_random_seed(args.seed)
    steps = _StepTimes()
    tf.get_logger().addHandler(steps)
    tf.get_logger().setLevel(logging.INFO)
    # train_loop saves at step 0 and whenever checkpoint_every_n steps have passed since
    model_lib_v2.train_loop(pipeline_config_path=args.pipeline_config,
                            model_dir=args.model_dir, train_steps=args.steps,
                            checkpoint_every_n=args.steps)
    return {"steps": args.steps, "seconds_in_process": round(time.perf_counter() - t0, 2),
            "per_step_seconds": {str(k): v for k, v in sorted(steps.times.items())}}


def evaluate(args) -> dict:
    """TF's evaluation of ``args.evaluate`` (a checkpoint prefix) -> its metrics."""
    import tensorflow as tf
    from object_detection import inputs, model_lib_v2
    from object_detection.builders import model_builder
    from object_detection.utils import config_util

    t0 = time.perf_counter()
    configs = config_util.get_configs_from_pipeline_file(args.pipeline_config)
    model = model_builder.build(configs["model"], is_training=False)
    eval_input = inputs.eval_input(configs["eval_config"], configs["eval_input_configs"][0],
                                   configs["model"], model=model)
    global_step = tf.Variable(0, trainable=False, dtype=tf.int64)
    path = args.evaluate
    if tf.io.gfile.isdir(path):  # a model_dir: its latest checkpoint
        path = tf.train.latest_checkpoint(path)
    tf.train.Checkpoint(step=global_step, model=model).restore(path).expect_partial()
    metrics = model_lib_v2.eager_eval_loop(model, configs, eval_input, use_tpu=False,
                                           global_step=global_step)
    return {"checkpoint": path, "step": int(global_step.numpy()),
            "seconds": round(time.perf_counter() - t0, 1),
            "metrics": {k: float(v) for k, v in metrics.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline-config", required=True)
    parser.add_argument("--write-config")
    parser.add_argument("--tfrecord", nargs="+")
    parser.add_argument("--label-map")
    parser.add_argument("--num-classes", type=int)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--model-dir")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--eval-tfrecord", nargs="+")
    parser.add_argument("--num-steps", type=int)
    parser.add_argument("--learning-rate-base", type=float)
    parser.add_argument("--warmup-learning-rate", type=float)
    parser.add_argument("--warmup-steps", type=int)
    parser.add_argument("--keep-bfloat16", action="store_true")
    parser.add_argument("--image-size", type=int,
                        help="with --write-config: the image resizer's size (a smaller input)")
    parser.add_argument("--fine-tune-checkpoint", help="with --write-config: start from it")
    parser.add_argument("--fine-tune-checkpoint-type", default="detection")
    parser.add_argument("--evaluate", metavar="CHECKPOINT")
    args = parser.parse_args()
    if args.evaluate:
        print(json.dumps(evaluate(args)))
    elif args.write_config:
        write_config(args)
        print(json.dumps({"wrote": args.write_config}))
    else:
        print(json.dumps(train(args)))


if __name__ == "__main__":
    main()
