# ---
# jupyter:
#   jupytext:
#     formats: py:percent,ipynb
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Detections from a TF OD API checkpoint
#
# The TF2 model zoo's inference notebook, in jaxdet: load a zoo model folder (its
# `pipeline.config` and `checkpoint/ckpt-0`), detect objects in photos given as files or numpy
# arrays, draw them, and check them against the detections TensorFlow itself computed for
# the same JPEG files.
#
# With a model downloaded from the zoo, set `MODEL` to its folder, e.g.
# `MODEL = Path("ssd_mobilenet_v2_320x320_coco17_tpu-8")`. Without one, this notebook builds
# a stand-in: the SSD MobileNetV2 320 checkpoint that jaxdet's test suite keeps, **written
# by TensorFlow** with the TF OD API's own model builder and random weights. Random weights
# give meaningless boxes, so look at the comparison with TF's detections below, not at what
# the boxes cover.

# %%
import logging
import shutil
import sys
from pathlib import Path

import numpy as np
from IPython.display import display

import jaxdet

logging.basicConfig(format="%(message)s")  # every library's warnings, shown in the notebook
logging.getLogger("jaxdet").setLevel(logging.INFO)  # and jaxdet's progress lines
MODEL = None  # a TF2 zoo model folder, e.g. Path("ssd_mobilenet_v2_320x320_coco17_tpu-8")
REPO = Path(jaxdet.__file__).resolve().parents[2]  # a clone of jaxdet (pip install -e .)
FIXTURE = REPO / "tests/interop/fixtures/tf_ssd_mobilenet_v2_320x320_coco17_tpu-8"

if MODEL is None:
    sys.path.insert(0, str(FIXTURE.parent))
    from tf_fixture_values import rebuild_data  # the fixture keeps its values compactly

    MODEL = Path("zoo/ssd_mobilenet_v2_320x320_coco17_tpu-8")
    rebuild_data(FIXTURE, MODEL / "checkpoint" / "ckpt-0")
    shutil.copy(FIXTURE / "pipeline.config", MODEL / "pipeline.config")
sorted(str(p) for p in MODEL.rglob("*") if p.is_file())

# %% [markdown]
# ## Load the model
#
# `jaxdet.load` converts the `pipeline.config` (each field jaxdet treats differently is
# logged as a warning) and imports the newest checkpoint in the folder. It computes in
# float32, as TensorFlow ran this checkpoint (a zoo config's `use_bfloat16` applies only when
# training or evaluating on a TPU, in TF and in jaxdet). Files are decoded as
# `tf.io.decode_jpeg` decodes them, because the weights come from TensorFlow.

# %%
detector = jaxdet.load(MODEL)
print(detector)
print("decodes JPEGs as:", detector.decode, "| first classes:", detector.class_names[:5])

# %% [markdown]
# ## Detect objects in photos
#
# Two photos of another shape than the model's 300x300 input: the model's resizer stretches
# them and the boxes come back in each photo's own pixels. `predict` takes a path, a numpy
# array, a PIL image, or a list of them.

# %%
SHARED = REPO.parent / "shared" / "data" / "images"
JPEGS = REPO / "tests" / "data" / "fixtures" / "jpeg"
if SHARED.is_dir():
    photos = {f"shared/{p.name}": p for p in sorted(SHARED.glob("*.jpg"))}
else:  # a clone without the project's shared data: two of the suite's JPEG photos
    photos = {p.name: p for p in (JPEGS / "photo_420_q90.jpg", JPEGS / "photo_444_q95.jpg")}

found = detector.predict(list(photos.values()), max_detections=10)
for name, detections in zip(photos, found, strict=True):
    print(f"{name}: {detections.image_size[1]}x{detections.image_size[0]} px, "
          f"{len(detections)} detections")
    for box, score, label in list(zip(detections.boxes, detections.scores,
                                      detections.class_names, strict=True))[:3]:
        print(f"   {label:>14s} {score:.3f}  x0 y0 x1 y1 = {np.round(box, 1).tolist()}")

# %%
for detections in found:
    picture = detections.draw(score_threshold=0.0)
    picture.thumbnail((640, 640))
    display(picture)

# %% [markdown]
# The same from a numpy array (decoded here by Pillow; a program's camera frames or a
# `tf.data` batch's images come in as arrays too):

# %%
from PIL import Image  # noqa: E402

array = np.asarray(Image.open(next(iter(photos.values()))).convert("RGB"))
from_array = detector.predict(array, max_detections=3)
print(array.shape, array.dtype, "->", from_array.to_coco(image_id=1)[0])

# %% [markdown]
# ## The same detections as TensorFlow
#
# The suite keeps TF's own detections for these photos (`tf.io.decode_jpeg`, the model's
# `preprocess`, `predict` and `postprocess`, run by the TF OD API). Every one of TF's 20 best
# should be among jaxdet's: the same class, the box within half a pixel, the score within
# 2e-4.

# %%
tf = np.load(FIXTURE / "photos.npz")
for name, detections in zip(photos, detector.predict(list(photos.values())), strict=True):
    if f"{name}/boxes" not in tf:
        print(f"{name}: TF's detections were not recorded for this photo")
        continue
    height, width = detections.image_size
    tf_boxes = tf[f"{name}/boxes"][:20] * [height, width, height, width]
    tf_classes = np.asarray(detector.labels.ids)[tf[f"{name}/classes"][:20]]
    matched = 0
    for box, cls, score in zip(tf_boxes, tf_classes, tf[f"{name}/scores"][:20], strict=True):
        close = ((detections.class_ids == cls)
                 & (np.abs(detections.scores - score) <= 2e-4)
                 & (np.abs(detections.boxes_yxyx - box).max(axis=1) <= 0.5))
        matched += bool(close.any())
    print(f"{name}: {matched} of TF's top 20 detections found by jaxdet")
    assert matched == 20

# %% [markdown]
# ## Next
#
# - `found[0].to_json()` is what `jaxdet predict --pipeline-config ... --checkpoint ...`
#   writes per image; `.to_coco(image_id)` gives COCO results rows.
# - `detector.evaluate()` computes COCO metrics on the config's `eval_input_reader`
#   (set its paths with `overrides=["data.eval.input_path=..."]`).
# - `detector.export("exported/", format="onnx")` writes a serving artifact.
