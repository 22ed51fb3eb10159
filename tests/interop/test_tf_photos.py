"""A TF OD API checkpoint run by ``jaxdet predict`` on real JPEG photos gives TF's own
detections.

Each TF detector fixture's ``photos.npz`` (fixtures/make_tf_photo_fixtures.py, run with the real
TF OD API) holds TF's detections on JPEG photos of other shapes than the model's input, taken
the TF OD API's way: ``tf.io.decode_jpeg``, the model's ``preprocess`` (fixed-shape resizers
stretch them, keep-aspect-ratio ones letterbox them), ``predict``, ``postprocess``. Here the
same files go through ``predict.predict_images`` with the TF checkpoint, the path ``jaxdet
predict --pipeline-config ... --checkpoint ...`` takes: decoding as TF does, the eval resize,
normalization on the device, the jitted predict, boxes mapped back to the photo's pixels.
Every one of TF's top detections must have a jaxdet detection of the same class with the box
within 0.5 pixel and the score within 2e-4 (matched as sets: near-ties may swap places).
With ``../shared`` present, its photos are checked too.

Faster R-CNN may miss up to 3 of the 20: the letterbox's padding is one flat colour, so many
anchors over it get first-stage scores within 1e-6 of each other (its random weights make the
ResNet's activations reach ~1e5), and float32 noise orders those near-ties, hence which
proposals survive NMS from the 90th on, differently (the same boxes, in another order; the
first 90 proposals are TF's). A JPEG decoded the other way misses most of them.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from jaxdet.config.loader import load_config
from jaxdet.config.tfod import load_pipeline_config
from jaxdet.jobs.predict import predict_images
from jaxdet.results.labels import class_labels

FIXTURES = Path(__file__).parent / "fixtures"
PHOTOS = Path(__file__).parents[1] / "data" / "fixtures" / "jpeg"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "images"
sys.path.insert(0, str(FIXTURES))
from tf_fixture_values import rebuild_data  # noqa: E402

PLACEHOLDERS = ["data.train.input_path=unused", "data.eval.input_path=unused"]
TOP = 20  # TF's best detections that must be matched
SCORE_TOL = 2e-4
BOX_TOL_PX = 0.5
# The heaviest compiles run with -m exhaustive; the default suite keeps a stretched SSD
# (MobileNetV2, fixed shape), the letterboxed EfficientDet and the letterboxed CenterNet.
HEAVY = {"tf_ssd_resnet50_v1_fpn_640x640_coco17_tpu-8",
         "tf_ssd_mobilenet_v2_fpnlite_320x320_coco17_tpu-8",
         "tf_faster_rcnn_resnet50_v1_640x640_coco17_tpu-8"}
MISSES = {"tf_faster_rcnn_resnet50_v1_640x640_coco17_tpu-8": 3}
NAMES = [pytest.param(d.name, marks=[pytest.mark.exhaustive] if d.name in HEAVY else [])
         for d in sorted(FIXTURES.glob("tf_*")) if (d / "photos.npz").is_file()]

pytestmark = pytest.mark.xdist_group("tf_detectors")


def _config(fixture: Path):
    if (fixture / "jaxdet.yaml").is_file():  # CenterNet's fixture carries its jaxdet config
        return load_config(fixture / "jaxdet.yaml")
    return load_pipeline_config(fixture / "pipeline.config", PLACEHOLDERS)


@pytest.fixture(scope="module", params=NAMES)
def predicted(request, tmp_path_factory):
    """jaxdet's and TF's detections of every photo, as pixel boxes of the photo."""
    fixture = FIXTURES / request.param
    tmp = tmp_path_factory.mktemp(request.param)
    prefix = rebuild_data(fixture, tmp / "ckpt" / "ckpt-0")
    tf = dict(np.load(fixture / "photos.npz"))
    names = sorted({k.rsplit("/", 1)[0] for k in tf})
    photos = tmp / "photos"
    for name in names:
        source = SHARED / name.removeprefix("shared/") if name.startswith("shared/") \
            else PHOTOS / name
        if source.is_file():
            (photos / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, photos / name)
    config = _config(fixture)
    summary = predict_images(config, None, [photos], tmp / "out", checkpoint=prefix,
                             batch_size=1, progress=False)
    ids, _ = class_labels(config, tmp / "out")
    ours = {Path(e["image"]).relative_to(photos).as_posix(): e for e in summary.images}
    return {"tf": tf, "ours": ours, "ids": ids, "names": [n for n in names if n in ours],
            "misses": MISSES.get(request.param, 0)}


def _match(entry: dict, tf: dict, name: str, ids: list[int], misses: int = 0) -> int:
    """How many of TF's top detections of ``name`` jaxdet has (at most ``misses`` missing)."""
    height, width = entry["height"], entry["width"]
    dets = [(d["class_id"], d["score"], np.array(d["box_xyxy"])) for d in entry["detections"]]
    boxes = tf[f"{name}/boxes"] * np.array([height, width, height, width])  # TF: normalized
    unmatched = list(range(len(dets)))
    top = min(TOP, int(tf[f"{name}/num_detections"]))
    missing = []
    for k in range(top):
        cls = ids[int(tf[f"{name}/classes"][k])]
        score = float(tf[f"{name}/scores"][k])
        y0, x0, y1, x1 = boxes[k]
        want = np.array([x0, y0, x1, y1])
        found = [i for i in unmatched if dets[i][0] == cls and abs(dets[i][1] - score) <= SCORE_TOL
                 and np.abs(dets[i][2] - want).max() <= BOX_TOL_PX]
        if not found:
            missing.append(f"TF's detection {k} (class {cls}, score {score:.6f}, box "
                           f"{want.round(2).tolist()})")
            continue
        unmatched.remove(found[0])
    assert len(missing) <= misses, f"{name}: no match in jaxdet's for " + "; ".join(missing)
    return top - len(missing)


def test_committed_photos_give_tfs_detections(predicted):
    committed = [n for n in predicted["names"] if not n.startswith("shared/")]
    assert len(committed) == 3
    for name in committed:
        sha = hashlib.sha256((PHOTOS / name).read_bytes()).hexdigest()
        assert sha == str(predicted["tf"][f"{name}/file_sha256"])  # the photos TF saw
        assert _match(predicted["ours"][name], predicted["tf"], name, predicted["ids"],
                      predicted["misses"]) >= TOP - predicted["misses"]


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_shared_photos_give_tfs_detections(predicted):
    shared = [n for n in predicted["names"] if n.startswith("shared/")]
    assert shared
    for name in shared:
        assert _match(predicted["ours"][name], predicted["tf"], name, predicted["ids"],
                      predicted["misses"]) >= TOP - predicted["misses"]


def test_the_photos_are_not_square(predicted):
    """They are stretched or letterboxed by the resizer, not fed at the model's shape."""
    for name in predicted["names"]:
        entry = predicted["ours"][name]
        assert entry["height"] != entry["width"], name

