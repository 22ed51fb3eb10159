"""Time to load a TF OD API checkpoint into the jaxdet detector its pipeline.config builds.

    python benchmarks/checkpoint_load.py --pipeline-config PIPELINE --checkpoint CKPT [--repeat 3]

Reports (best of ``--repeat``): opening the checkpoint (index + object graph), reading every
tensor (CRC-checked), and the whole ``load_tf_detection_checkpoint`` into a built model; with
the checkpoint's size and MB/s. A checkpoint to measure is written with TensorFlow by
``tests/interop/fixtures/make_tf_detector_fixtures.py --full-to=DIR CONFIG``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

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
    times = {"open_s": [], "read_all_s": [], "load_into_model_s": []}
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ckpt = TfCheckpoint(args.checkpoint)
        ckpt.variables()
        times["open_s"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for key in ckpt.keys():
            ckpt.read(key)
        times["read_all_s"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        report = load_tf_detection_checkpoint(model, config, args.checkpoint)
        times["load_into_model_s"].append(time.perf_counter() - t0)
    size = sum(p.stat().st_size for p in Path(str(ckpt.prefix)).parent.glob(
        f"{Path(str(ckpt.prefix)).name}.*"))
    best = {k: round(min(v), 3) for k, v in times.items()}
    print(json.dumps({"benchmark": "checkpoint_load", "config": config.name or
                      Path(args.pipeline_config).stem, "checkpoint": str(ckpt.prefix),
                      "tensors": len(ckpt), "restored": len(report.restored),
                      "size_mb": round(size / 2**20, 1), **best,
                      "load_mb_per_s": round(size / 2**20 / best["load_into_model_s"], 1)}))


if __name__ == "__main__":
    main()
