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
# # Detections from a TF2 model-zoo model
#
# [Open in Colab](https://colab.research.google.com/github/jaxdet/jaxdet/blob/main/examples/tf_checkpoint_inference.ipynb)
#
# The TF2 model zoo's inference Colab, in jaxdet: download a zoo model (its `pipeline.config`
# and `checkpoint/ckpt-0`, exactly as TensorFlow trained it), detect objects in photos given
# as files or numpy arrays, and draw them.
#
# The download needs a network. Without one, the notebook says so and trains jaxdet's small
# shapes detector instead (circles, squares and triangles, about five minutes on a CPU), so that
# what it shows is a model's real output, never untrained weights dressed up as COCO classes.

# %%
# In Colab or any fresh Python: install jaxdet (skipped where it is installed already)
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("jaxdet") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                    "jaxdet @ git+https://github.com/jaxdet/jaxdet"], check=True)

# %%
import logging
import os
from pathlib import Path

import numpy as np
from IPython.display import display
from PIL import Image

import jaxdet

logging.basicConfig(format="%(message)s", stream=sys.stdout)  # logs as plain output
logging.getLogger("jaxdet").setLevel(logging.INFO)  # and jaxdet's progress lines
QUICK = os.environ.get("JAXDET_EXAMPLES_QUICK") == "1"  # the test suite's tiny run
MODEL_NAME = "ssd_mobilenet_v2_320x320_coco17_tpu-8"  # any name of the TF2 zoo

try:
    MODEL = jaxdet.download_zoo_model(MODEL_NAME, progress=False)  # cached after the first time
    print(f"{MODEL_NAME}:", sorted(p.relative_to(MODEL).as_posix()
                                   for p in MODEL.rglob("*") if p.is_file()))
except jaxdet.ZooDownloadError as error:
    MODEL = None
    print(f"offline: {error}")
    print("falling back to a detector trained here on generated shapes (not a COCO model)")

# %% [markdown]
# ## Load the model
#
# `jaxdet.load` converts the zoo folder's `pipeline.config` (each field jaxdet treats
# differently is logged as a warning) and imports its newest checkpoint. It computes in
# float32, as TensorFlow runs this checkpoint outside a TPU, and decodes JPEGs as
# `tf.io.decode_jpeg` does, because the weights come from TensorFlow.
#
# Offline, the fallback detector is trained first: `jaxdet.fit` is `jaxdet train` (a workdir
# with checkpoints; running the cell again resumes or does nothing).

# %%
if MODEL is not None:
    detector = jaxdet.load(MODEL)
    photos = [jaxdet.sample_data("photos") / "dogs.jpg",
              jaxdet.sample_data("ducky") / "test" / "out1.jpg"]
else:
    from jaxdet.data.shapes import generate_shapes

    quick = ["train.num_steps=4", "train.batch_size=2", "data.train.num_images=8",
             "model.backbone.depth_multiplier=0.25", "parallel.data=1"]
    run = jaxdet.fit("shapes_demo", "runs/shapes", evaluate=False, progress=False,
                     overrides=quick if QUICK else ["train.log_every=500"])
    detector = run.detector()
    shapes = generate_shapes(Path("shapes_photos"), 2, image_size=(180, 240), seed=11)
    photos = sorted((shapes.parent / "images").glob("*.jpg"))
print(detector)
print("classes:", detector.class_names[:8], "..." if len(detector.class_names) > 8 else "")

# %% [markdown]
# ## Detect objects in photos
#
# Photos of another shape than the model's input: the model's resizer fits them, and the
# boxes come back in each photo's own pixels. `predict` takes a path, a numpy array, a PIL
# image, or a list of them, and gives one `Detections` per image: it prints as one line,
# indexes and filters like an array, and shows itself as a picture in a notebook.

# %%
found = detector.predict(photos, max_detections=10)
for detections in found:
    print(detections)
    for one in detections[:3]:
        print("   ", one)

# %%
for detections in found:
    picture = detections.above(0.3).draw(score_threshold=0.3)
    picture.thumbnail((640, 640))
    display(picture)

# %% [markdown]
# The same from a numpy array (a program's camera frames or a `tf.data` batch's images come
# in as arrays too), filtered with a boolean mask, and as COCO results rows:

# %%
array = np.asarray(Image.open(photos[0]).convert("RGB"))
from_array = detector.predict(array, max_detections=5)
confident = from_array[from_array.scores >= 0.3]
print(array.shape, array.dtype, "->", len(from_array), "detections,", len(confident),
      "scoring >= 0.3")
print(from_array.to_coco(image_id=1)[:1])

# %% [markdown]
# ## Next
#
# - `found[0].to_json()` is what `jaxdet predict --workdir <zoo folder> photos/ --out out/`
#   writes per image; `.to_pandas()` gives a table.
# - `detector.evaluate()` computes COCO metrics on the config's `eval_input_reader`
#   (set its paths with `overrides=["data.eval.input_path=..."]`).
# - `detector.export("exported/", format="onnx")` writes a serving artifact.
# - The TF OD API guide's parity table shows, model by model, that jaxdet finds TensorFlow's
#   own detections on real photos.
