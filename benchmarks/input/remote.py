"""TFRecord input from a bucket against the same files on local disk; prints one JSON object.

    python -m benchmarks.input.remote                  # a GCS emulator on 127.0.0.1
    python -m benchmarks.input.remote --gcs-folder gs://my-bucket/scratch   # a real bucket

Generated shapes (JPEG, ``--image-size``) are written as TFRecord shards, once on local disk
and once in the bucket (by default the GCS emulator the suite uses, ``tests/gcs_emulator.py``,
started here and stopped at the end: fake-gcs-server, in memory, so the figure is the
file layer's own cost with no network in between). Per place, by turns for ``--rounds``
rounds: the time to build the source (every record read once, streamed, and CRC-checked) and
the train loader's images/s over ``--batches`` batches after one warm-up batch (each image
fetched by its byte range; decode, augment, resize; ``data.num_workers`` as the config sets
it). Medians, and ``ratio`` = bucket / local images/s.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks import common
from jaxdet import files
from jaxdet.config.loader import load_config
from jaxdet.data import build as data_build
from jaxdet.data.coco import CocoSource
from jaxdet.data.shapes import generate_shapes
from jaxdet.data.tfrecord_source import TfRecordSource
from jaxdet.jobs.convert_dataset import source_to_tfrecord

SHARDS = 4


def _measure(config, pattern: str, batches: int) -> tuple[float, float]:
    """(seconds to build the source, loader images/s) for the shards matching ``pattern``."""
    t0 = time.perf_counter()
    source = TfRecordSource(pattern, num_classes=config.model.num_classes)
    built = time.perf_counter() - t0
    loader = data_build.build_train_loader(config, source)
    try:
        next(loader)  # warm-up (and the loader's start-up)
        t0 = time.perf_counter()
        for _ in range(batches):
            next(loader)
        return built, batches * config.train.batch_size / (time.perf_counter() - t0)
    finally:
        close = getattr(loader, "close", None)
        if close is not None:
            close()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="retinanet_resnet50_fpn_640")
    parser.add_argument("--num-images", type=int, default=256)
    parser.add_argument("--image-size", type=int, nargs=2, default=[480, 640])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gcs-folder", help="a gs:// folder to use instead of the emulator")
    args = parser.parse_args(argv)
    config = load_config(args.config, [f"train.batch_size={args.batch_size}"])
    emulator = None
    if args.gcs_folder is None:
        from tests import gcs_emulator

        emulator = gcs_emulator.start()
        os.environ.update(emulator.env())
        folder = f"gs://{emulator.bucket}/remote_input"
    else:
        folder = args.gcs_folder.rstrip("/")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ann = generate_shapes(Path(tmp) / "shapes", args.num_images,
                                  image_size=tuple(args.image_size), seed=0)
            coco = CocoSource(ann, Path(ann).parent / "images")
            source_to_tfrecord(coco, Path(tmp) / "records" / "train.tfrecord", shards=SHARDS,
                               progress=False)
            for shard in sorted((Path(tmp) / "records").iterdir()):
                files.write_bytes(f"{folder}/{shard.name}", shard.read_bytes())
            size_mb = sum(p.stat().st_size for p in (Path(tmp) / "records").iterdir()) / 2**20
            glob = f"train.tfrecord-?????-of-{SHARDS:05d}"
            places = {"local": str(Path(tmp) / "records" / glob), "bucket": f"{folder}/{glob}"}
            runs = common.by_turns(
                {name: (lambda pattern=pattern: _measure(config, pattern, args.batches))
                 for name, pattern in places.items()}, args.rounds,
                report=common.report_progress)
    finally:
        if emulator is not None:
            emulator.stop()
    medians = {name: {"build_seconds": round(common.median(b for b, _ in r), 3),
                      "loader_images_per_second": round(common.median(i for _, i in r), 1),
                      "rounds": [round(i, 1) for _, i in r]}
               for name, r in runs.items()}
    result = {"benchmark": "remote_input", "config": args.config,
              "store": "GCS emulator on 127.0.0.1" if emulator else args.gcs_folder,
              "num_images": args.num_images, "image_size": args.image_size,
              "shards": SHARDS, "tfrecord_mb": round(size_mb, 1), **medians,
              "ratio": round(medians["bucket"]["loader_images_per_second"]
                             / medians["local"]["loader_images_per_second"], 3),
              "machine": common.machine_info()}
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
