"""COCO AP of TF's SSD TFLite file written by jaxdet (``--format tflite_tf``), float32 and int8,
against ``jaxdet eval`` of the same checkpoint; prints one JSON object.

    make demo                                            # a trained run in runs/demo
    .venv-tf/bin/python -m benchmarks.accuracy.tflite_int8 --workdir runs/demo

The run's latest checkpoint is exported four times (``jobs.export_job.export_model``): float32
and int8 (TF's post-training integer quantization, calibrated on ``--representative-images``
images of the config's training data), each with TF's fast NMS and with its regular NMS. Each
file runs in the LiteRT interpreter, one image at a time, on the config's evaluation data as
``jaxdet eval`` prepares it (resized and normalized on the host: the file takes the network's
input); its boxes (normalized to the network's input, not clipped by TF's operation) are
clipped to the image and scaled to its pixels, and scored with jaxdet's COCO evaluator
(pycocotools) against the data's ground truth. ``jaxdet eval``'s own AP of the checkpoint is
the reference. Needs TensorFlow (``make install-tf-export``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import common


def _evaluate_file(path: Path, config, workdir: Path, *, pads_raw_pixels: bool,
                   max_images: int | None) -> dict:
    from ai_edge_litert.interpreter import Interpreter

    from jaxdet.data import build as data_build
    from jaxdet.eval.coco_eval import CocoEvaluator
    from jaxdet.results.labels import labels_of

    source = data_build.build_source(config.data.eval, workdir,
                                     num_classes=config.model.num_classes, field="data.eval")
    loader = data_build.build_eval_loader(config, source)
    normalize = data_build.pixel_normalizer(config, pads_raw_pixels=pads_raw_pixels)
    labels = labels_of(config, workdir)
    evaluator = CocoEvaluator(source.ground_truth(), list(labels.ids))
    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    (inp,) = interpreter.get_input_details()
    runner = interpreter.get_signature_runner()
    seconds, done = 0.0, 0
    for batch in loader:
        pixels = np.asarray(normalize(batch["images"], batch["image_info"]), np.float32)
        for image, info, image_id, real in zip(pixels, batch["image_info"], batch["image_id"],
                                               batch["mask"], strict=True):
            if not real or (max_images is not None and done >= max_images):
                continue
            start = time.perf_counter()
            out = runner(**{"input": image[None]})
            seconds += time.perf_counter() - start
            done += 1
            h, w = float(info[0]), float(info[1])
            boxes = np.clip(out["output_3"][0], 0.0, 1.0) * np.asarray([h, w, h, w])
            evaluator.add_detections(np.asarray([image_id]), boxes[None], out["output_1"],
                                     out["output_2"].astype(np.int32),
                                     out["output_0"].astype(np.int32))
    metrics = evaluator.evaluate()
    return {"AP": round(float(metrics["AP"]), 4), "AP50": round(float(metrics["AP50"]), 4),
            "images": done, "ms_per_image": round(1000 * seconds / max(done, 1), 2),
            "file_mb": round(path.stat().st_size / 1e6, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", required=True, help="a trained SSD-family jaxdet run")
    parser.add_argument("--representative-images", type=int, default=100)
    parser.add_argument("--max-images", type=int, default=None,
                        help="evaluate on the first N evaluation images only")
    args = parser.parse_args()

    from jaxdet import tasks
    from jaxdet.config.loader import load_config
    from jaxdet.jobs.evaluation import evaluate
    from jaxdet.jobs.export_job import TfliteOptions, export_model

    workdir = Path(args.workdir)
    config = load_config(workdir / "config.yaml")
    family = tasks.resolve(config)
    reference = evaluate(config, workdir)
    result = {"benchmark": "tflite_int8", "config": config.name,
              "jaxdet_eval": {"AP": round(float(reference["AP"]), 4),
                              "AP50": round(float(reference["AP50"]), 4)},
              "representative_images": args.representative_images, "files": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for quantize in (None, "int8"):
            for regular in (False, True):
                name = f"{quantize or 'float32'}_{'regular' if regular else 'fast'}_nms"
                out = Path(tmp) / name
                start = time.perf_counter()
                export_model(config, workdir, out, format="tflite_tf", tflite=TfliteOptions(
                    regular_nms=regular, quantize=quantize,
                    representative_images=args.representative_images))
                row = {"export_s": round(time.perf_counter() - start, 1)}
                row.update(_evaluate_file(out / "model.tflite", config, workdir,
                                          pads_raw_pixels=family.pads_raw_pixels,
                                          max_images=args.max_images))
                result["files"][name] = row
                print(json.dumps({name: row}), flush=True)
    result["machine"] = common.machine_info()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
