"""The TF Object Detection API's own training, as ``model_main_tf2.py`` runs it; for
``benchmarks/train_vs_tfod.py``. Run under the TF peer's Python (``../shared/peer/setup_tfod.sh``):

    TF_USE_LEGACY_KERAS=1 PYTHONPATH=~/tfod-peer/tfod-src ~/tfod-peer/tfod-venv/bin/python \\
        benchmarks/tfod_train_peer.py --pipeline-config CONFIG --write-config edited.config \\
        --tfrecord pets.record --label-map pet_label_map.pbtxt --num-classes 37 --batch-size 8
    ... benchmarks/tfod_train_peer.py --pipeline-config edited.config --model-dir D --steps 30

``--write-config``: the pipeline.config with its training input, label map, class count and
batch size replaced, no fine-tune checkpoint (there are no weights to start from) and
``use_bfloat16: false`` (fp32 on both sides), written with TF's own ``config_util`` so both
frameworks read the same file. Otherwise: ``model_lib_v2.train_loop`` (what
``model_main_tf2.py`` calls) for ``--steps`` steps into ``--model-dir``, checkpointing only at
the end, and prints one JSON line: the seconds it took, and the per-step time TF logs
every 100 steps (``model_lib_v2`` runs steps 100 at a time in one ``tf.function``: the time of
each block of 100 over 100; the first block includes tracing).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import time


def write_config(args) -> None:
    from object_detection.utils import config_util

    from tfod_input_peer import configs_for_data  # this script's folder is on sys.path

    configs = configs_for_data(args)
    train = configs["train_config"]
    train.fine_tune_checkpoint = ""
    train.use_bfloat16 = False
    configs["eval_input_configs"][0].label_map_path = args.label_map
    configs["eval_input_configs"][0].tf_record_input_reader.input_path[:] = args.tfrecord
    proto = config_util.create_pipeline_proto_from_configs(configs)
    with open(args.write_config, "w") as f:
        from google.protobuf import text_format

        f.write(text_format.MessageToString(proto))


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

    steps = _StepTimes()
    tf.get_logger().addHandler(steps)
    tf.get_logger().setLevel(logging.INFO)
    model_lib_v2.train_loop(pipeline_config_path=args.pipeline_config,
                            model_dir=args.model_dir, train_steps=args.steps,
                            checkpoint_every_n=10**9)
    return {"steps": args.steps, "seconds_in_process": round(time.perf_counter() - t0, 2),
            "per_step_seconds": {str(k): v for k, v in sorted(steps.times.items())}}


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
    args = parser.parse_args()
    if args.write_config:
        write_config(args)
        print(json.dumps({"wrote": args.write_config}))
    else:
        print(json.dumps(train(args)))


if __name__ == "__main__":
    main()
