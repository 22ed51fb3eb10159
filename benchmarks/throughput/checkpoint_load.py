"""Time to load a TF OD API checkpoint into the jaxdet detector its pipeline.config builds.

    python -m benchmarks.throughput.checkpoint_load --pipeline-config PIPELINE \
        --checkpoint CKPT [--repeat 3]

Reports (best of ``--repeat``): opening the checkpoint (index + object graph), reading every
tensor (CRC-checked), and the whole ``load_tf_detection_checkpoint`` into a built model; with
the checkpoint's size and MB/s. A checkpoint to measure is written with TensorFlow by
``tests/interop/fixtures/make_tf_detector_fixtures.py --full-to=DIR CONFIG``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks import common
from jaxdet.config.tfod import load_pipeline_config
from jaxdet.interop.tf_checkpoint import TfCheckpoint
from jaxdet.tasks.ssd import build as ssd_build
from jaxdet.tasks.weights import load_tf_detection_checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline-config", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    config = load_pipeline_config(args.pipeline_config, [
        "data.train.input_path=unused", "data.eval.input_path=unused", "precision=fp32"])
    model = ssd_build.build_model(config)
    held = {}

    def open_checkpoint():
        held["ckpt"] = TfCheckpoint(args.checkpoint)
        held["ckpt"].variables()

    def read_all():
        for key in held["ckpt"].keys():
            held["ckpt"].read(key)

    def load_into_model():
        held["report"] = load_tf_detection_checkpoint(model, config, args.checkpoint)

    times = common.by_turns({"open_s": lambda: common.timed(open_checkpoint)[1],
                             "read_all_s": lambda: common.timed(read_all)[1],
                             "load_into_model_s": lambda: common.timed(load_into_model)[1]},
                            args.repeat)
    ckpt, report = held["ckpt"], held["report"]
    size = sum(p.stat().st_size for p in Path(str(ckpt.prefix)).parent.glob(
        f"{Path(str(ckpt.prefix)).name}.*"))
    best = {k: round(min(v), 3) for k, v in times.items()}
    print(json.dumps({"benchmark": "checkpoint_load", "config": config.name or
                      Path(args.pipeline_config).stem, "checkpoint": str(ckpt.prefix),
                      "tensors": len(ckpt), "restored": len(report.restored),
                      "size_mb": round(size / 2**20, 1), **best,
                      "load_mb_per_s": round(size / 2**20 / best["load_into_model_s"], 1),
                      "machine": common.machine_info(devices=False)}))


if __name__ == "__main__":
    main()
