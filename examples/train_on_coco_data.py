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
# # Train a detector on your own COCO data
#
# [Open in Colab](https://colab.research.google.com/github/jaxdet/jaxdet/blob/main/examples/train_on_coco_data.ipynb)
#
# Your data as a COCO annotations file and a folder of images, a config that starts from a
# shipped one, training from Python with its curves, the evaluation's sample grid, and the
# trained detector on a new image.
#
# So that this notebook runs anywhere, "your data" is generated here: photos of circles,
# squares and triangles with their COCO annotations. Point `TRAIN` and `EVAL` at your own
# files instead (e.g. a dataset exported from CVAT or Label Studio in COCO format).

# %%
# In Colab or any fresh Python: install jaxdet (skipped where it is installed already)
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("jaxdet") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                    "jaxdet @ git+https://github.com/jaxdet/jaxdet"], check=True)

# %%
import json
import logging
import os
from pathlib import Path

from IPython.display import display
from PIL import Image

import jaxdet
from jaxdet.data.shapes import generate_shapes

logging.basicConfig(format="%(message)s", stream=sys.stdout)  # logs as plain output
logging.getLogger("jaxdet").setLevel(logging.INFO)  # and jaxdet's progress lines
QUICK = os.environ.get("JAXDET_EXAMPLES_QUICK") == "1"  # the test suite's tiny run
DATA = Path("my_data").absolute()
TRAIN = generate_shapes(DATA / "train", 16 if QUICK else 600, seed=1, image_size=(96, 128))
EVAL = generate_shapes(DATA / "eval", 8 if QUICK else 60, seed=2, image_size=(96, 128))
coco = json.loads(TRAIN.read_text())
print(f"{TRAIN.relative_to(Path.cwd())}: {len(coco['images'])} images, "
      f"{len(coco['annotations'])} boxes, classes {[c['name'] for c in coco['categories']]}")

# %% [markdown]
# ## A config
#
# `base:` starts from a shipped config (`jaxdet configs` lists them; a TF OD API
# `pipeline.config` converted with `jaxdet convert-config` works the same way) and the file
# changes what differs: here the data and the length of the run. A misspelt field is
# refused with the allowed names.

# %%
steps = 6 if QUICK else 600
config_text = f"""
base: shapes_demo
description: my detector, trained on my COCO data
data:
  train: {{type: coco, annotation_file: {TRAIN}, image_dir: {TRAIN.parent / 'images'}}}
  eval: {{type: coco, annotation_file: {EVAL}, image_dir: {EVAL.parent / 'images'}}}
train:
  num_steps: {steps}
  batch_size: {4 if QUICK else 16}
  checkpoint_every: {steps // 2}
  log_every: {1 if QUICK else 100}
eval:
  batch_size: 4
  num_visualizations: 8
parallel:
  data: 1
"""
Path("my_detector.yaml").write_text(config_text)
if QUICK:  # a smaller network for the test suite
    overrides = ["model.backbone.depth_multiplier=0.25", "model.neck.depth=16",
                 "model.head.depth=16"]
else:
    overrides = []

try:
    jaxdet.load("my_detector.yaml", overrides=["train.batch_sise=8"])
except jaxdet.ConfigError as error:
    print(error)

# %% [markdown]
# ## Train
#
# `fit` is `jaxdet train`: checkpoints, logs, TensorBoard events and evaluations go to the
# workdir, and calling it again resumes from the last checkpoint (after a crash or a
# preemption too).

# %%
result = jaxdet.fit("my_detector.yaml", "runs/my_detector", overrides=overrides, progress=False)
print(f"step {result.step}: {result.images_per_second:.0f} img/s after a "
      f"{result.compile_seconds:.0f} s compile; AP {result.eval_metrics['AP']:.3f}, "
      f"AP50 {result.eval_metrics['AP50']:.3f}")

# %% [markdown]
# The training curves (`curves.png` in the workdir) and the evaluation's sample grid: each
# evaluated image twice, side by side, its ground truth on the left and the detections on the
# right (the same pictures are in TensorBoard under the run's evaluation images):

# %%
workdir = Path("runs/my_detector")
display(Image.open(workdir / "curves.png"))
display(Image.open(workdir / "eval" / f"step_{result.step}" / "samples.png"))

# %% [markdown]
# ## Use it
#
# The trained detector on an image it has not seen, and the metrics again from Python
# (`detector.evaluate()` is `jaxdet eval`).

# %%
detector = result.detector()
image = sorted((EVAL.parent / "images").glob("*.jpg"))[0]
found = detector.predict(image)
display(found.draw())
metrics = detector.evaluate(progress=False)  # eval/step_N_2: the first one is kept
print({k: round(v, 3) for k, v in metrics.items() if k.startswith("AP")})
