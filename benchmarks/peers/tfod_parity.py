"""The TF side of ``benchmarks.accuracy.tfod_parity_table``; runs under the TF peer's Python,
from the repository's root:

    TF_USE_LEGACY_KERAS=1 PYTHONPATH=~/tfod-peer/tfod-src ~/tfod-peer/tfod-venv/bin/python \\
        -m benchmarks.peers.tfod_parity --out DIR --photos A.jpg B.jpg -- CONFIG.config ...

For each zoo pipeline.config as shipped: the detector built by ``model_builder.build``
(inference mode), every variable drawn as the suite's TF fixtures draw them (He-uniform
kernels, spread biases, batch-norm statistics around 0 and 1, so that scores spread; a
CenterNet's heads, and DeepMAC's mask projection, calibrated on the photos as
``make_tf_center_net_fixtures.py`` calibrates its fixture's: scores in (0, 1), boxes of real
size, keypoints and masks that spread), saved as the zoo saves it
(``DIR/<config>/checkpoint/ckpt-0``), then restored into a fresh detector as
``model_main_tf2.py`` restores one, and each photo taken the TF OD API's way
(``tf.io.decode_jpeg``, ``preprocess``, ``predict``, ``postprocess``). Writes
``DIR/<config>/tf.npz`` (per photo P: ``P/boxes`` normalized [ymin, xmin, ymax, xmax],
``P/scores``, ``P/classes`` 0-based, ``P/num_detections``, and ``P/keypoints`` [N, K, 2]
normalized (y, x) or ``P/masks`` [N, h, w] where the model gives them) and prints one JSON
line per config. The drawing and calibration are those of the suite's TF fixture scripts
(``tests/interop/fixtures``), imported from there.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
import tensorflow as tf
from object_detection.builders import model_builder
from object_detection.utils import config_util
from tests.interop.fixtures.make_tf_center_net_fixtures import (
    calibrate_deepmac_masks,
    calibrate_heads,
    drawn_recipes,
)
from tests.interop.fixtures.make_tf_detector_fixtures import (
    _calibrate_faster_rcnn,
    input_size,
    value_range,
)
from tests.interop.fixtures.tf_fixture_values import test_image, uniform


def _build(config_path: Path):
    configs = config_util.get_configs_from_pipeline_file(str(config_path))
    model = model_builder.build(configs["model"], is_training=False)
    height, width = input_size(configs["model"])
    image = test_image(height, width, seed=7)
    pre, shapes = model.preprocess(tf.constant(image[None], tf.float32))
    prediction = model.predict(pre, shapes)  # creates the variables
    if hasattr(model, "_mask_net"):  # DeepMAC's mask network: built by postprocess
        model.postprocess(prediction, shapes)
    return model, pre, shapes


def write_checkpoint(config_path: Path, out: Path, photos: list[Path] = ()) -> str:
    """A zoo-layout checkpoint of the config's detector with drawn values -> its prefix (a
    CenterNet's heads calibrated on ``photos``, see ``make_tf_center_net_fixtures``)."""
    model, pre, shapes = _build(config_path)
    for i, variable in enumerate(model.variables):
        low, high = value_range(variable.name, tuple(variable.shape))
        variable.assign(uniform(1_000_003 * (i + 1), tuple(variable.shape), low, high,
                                variable.dtype.as_numpy_dtype))
    if hasattr(model, "_mask_rcnn_box_predictor"):  # second-stage scores that spread
        _calibrate_faster_rcnn(model, pre, shapes, {})
    if hasattr(model, "_prediction_head_dict"):  # CenterNet: peaks, sizes, keypoints spread
        images = [model.preprocess(_decoded(p.read_bytes())) for p in photos]
        recipes = drawn_recipes(model)
        calibrate_heads(model, images or [(pre, shapes)], recipes)
        calibrate_deepmac_masks(model, images or [(pre, shapes)], recipes)
    shutil.rmtree(out, ignore_errors=True)
    return tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(out),
                                      max_to_keep=1).save(checkpoint_number=0)


def _decoded(data: bytes) -> tf.Tensor:
    """JPEG bytes -> [1, h, w, 3] float32, as the TF OD API decodes them."""
    return tf.cast(tf.io.decode_jpeg(data, channels=3), tf.float32)[None]


def detect(model, data: bytes) -> dict[str, np.ndarray]:
    pre, shapes = model.preprocess(_decoded(data))
    found = model.postprocess(model.predict(pre, shapes), shapes)
    n = int(found["num_detections"][0])
    out = {"boxes": np.asarray(found["detection_boxes"])[0, :n],
           "scores": np.asarray(found["detection_scores"])[0, :n],
           "classes": np.asarray(found["detection_classes"])[0, :n].astype(np.int64),
           "num_detections": np.int64(n)}
    if "detection_keypoints" in found:
        out["keypoints"] = np.asarray(found["detection_keypoints"])[0, :n]
    if "detection_masks" in found:
        out["masks"] = np.asarray(found["detection_masks"])[0, :n]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--photos", nargs="+", required=True)
    parser.add_argument("configs", nargs="+")
    args = parser.parse_args()
    for config in map(Path, args.configs):
        t0 = time.perf_counter()
        home = Path(args.out) / config.name.removesuffix(".config")
        home.mkdir(parents=True, exist_ok=True)
        shutil.copy(config, home / "pipeline.config")
        prefix = write_checkpoint(config, home / "checkpoint", list(map(Path, args.photos)))
        model = _build(config)[0]
        tf.train.Checkpoint(model=model).restore(prefix).assert_existing_objects_matched()
        arrays = {}
        for photo in map(Path, args.photos):
            for key, value in detect(model, photo.read_bytes()).items():
                arrays[f"{photo.name}/{key}"] = value
        np.savez_compressed(home / "tf.npz", **arrays)
        print(json.dumps({"config": config.name, "checkpoint": prefix,
                          "seconds": round(time.perf_counter() - t0, 1)}), flush=True)


if __name__ == "__main__":
    main()
