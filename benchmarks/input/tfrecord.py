"""TFRecord input speed against COCO JSON input of the same images; prints one JSON object.

    python -m benchmarks.input.tfrecord --num-images 512 --image-size 480 640 --batches 20

Generated shapes (JPEG) are written once as COCO JSON and as a TFRecord file of
tf.train.Example. Reported per format: the time to build the source (COCO: read the JSON;
TFRecord: CRC-check and decode every Example once) and the train loader's images/s over
``--batches`` batches (decode, augment, resize to the config's input size; ``worker_count``
0, i.e. in this process) after one warm-up batch. ``ratio`` = TFRecord / COCO images/s.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from benchmarks import common
from jaxdet.config.loader import load_config
from jaxdet.data import build as data_build
from jaxdet.data.coco import CocoSource
from jaxdet.data.shapes import generate_shapes
from jaxdet.data.tfrecord_source import TfRecordSource
from jaxdet.jobs.convert_dataset import source_to_tfrecord


def _loader_rate(config, source, batches: int) -> float:
    loader = data_build.build_train_loader(config, source)
    try:
        next(loader)  # warm-up (and grain start-up)
        t0 = time.perf_counter()
        for _ in range(batches):
            next(loader)
        return batches * config.train.batch_size / (time.perf_counter() - t0)
    finally:
        loader.close()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="retinanet_resnet50_fpn_640")
    parser.add_argument("--num-images", type=int, default=512)
    parser.add_argument("--image-size", type=int, nargs=2, default=[480, 640])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args(argv)
    config = load_config(args.config, [f"train.batch_size={args.batch_size}"])
    with tempfile.TemporaryDirectory() as tmp:
        ann = generate_shapes(Path(tmp) / "shapes", args.num_images,
                              image_size=tuple(args.image_size), seed=0)
        coco = CocoSource(ann, Path(ann).parent / "images")
        record = Path(tmp) / "shapes.tfrecord"
        source_to_tfrecord(coco, record, progress=False)
        t0 = time.perf_counter()
        coco = CocoSource(ann, Path(ann).parent / "images")
        coco_build = time.perf_counter() - t0
        t0 = time.perf_counter()
        tfr = TfRecordSource(str(record), num_classes=config.model.num_classes)
        tfr_build = time.perf_counter() - t0
        coco_rate = _loader_rate(config, coco, args.batches)
        tfr_rate = _loader_rate(config, tfr, args.batches)
        result = {
            "benchmark": "tfrecord_input",
            "config": args.config,
            "num_images": args.num_images,
            "image_size": args.image_size,
            "tfrecord_mb": round(record.stat().st_size / 2**20, 1),
            "coco": {"build_seconds": round(coco_build, 3),
                     "loader_images_per_second": round(coco_rate, 1)},
            "tfrecord": {"build_seconds": round(tfr_build, 3),
                         "build_ms_per_record": round(1000 * tfr_build / len(tfr), 3),
                         "loader_images_per_second": round(tfr_rate, 1)},
            "ratio": round(tfr_rate / coco_rate, 3),
            "machine": common.machine_info(),
        }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
