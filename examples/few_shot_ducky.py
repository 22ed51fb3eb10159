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
# # Few-shot: a new class from five photos
#
# [Open in Colab](https://colab.research.google.com/github/jaxdet/jaxdet/blob/main/examples/few_shot_ducky.ipynb)
#
# The TF2 release's few-shot Colab (the "rubber ducky" detector) in jaxdet: a COCO-pretrained
# RetinaNet (the zoo's `ssd_resnet50_v1_fpn_640x640_coco17_tpu-8`) learns a new class from
# five annotated photos given in memory. `jaxdet.fine_tune` restores the pretrained weights
# (the class predictor starts fresh for the new class), freezes the backbone and the neck, and
# trains the rest; the five photos and 13 held-out frames ship with jaxdet.
#
# The pretrained model is downloaded once (about 240 MB). Fine-tuning it takes a few minutes
# on a GPU and much longer on a laptop CPU. **Without a network** the notebook says so and
# pretrains jaxdet's small `shapes_demo` detector on generated circles, squares and triangles
# instead: a 128-pixel toy, not a COCO model, so expect it to find the duck in some frames and
# miss it in others. Five photos are too few without a real pretrained start, which is why the
# recipe starts from COCO weights.

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

import numpy as np
from IPython.display import display
from PIL import Image, ImageDraw

import jaxdet

logging.basicConfig(format="%(message)s", stream=sys.stdout)  # logs as plain output
logging.getLogger("jaxdet").setLevel(logging.INFO)  # and jaxdet's progress lines
QUICK = os.environ.get("JAXDET_EXAMPLES_QUICK") == "1"  # the test suite's tiny run
DUCKY = jaxdet.sample_data("ducky")  # train/robertducky1..5.jpg, boxes.json, test/

# %% [markdown]
# ## A pretrained detector

# %%
try:
    PRETRAINED = jaxdet.download_zoo_model("ssd_resnet50_v1_fpn_640x640_coco17_tpu-8",
                                           progress=False)
    print("starting from the COCO-pretrained RetinaNet ResNet50 640 of the TF2 zoo")
    STEPS = 100  # the TF Colab's recipe
except jaxdet.ZooDownloadError as error:
    print(f"offline: {error}")
    print("falling back to jaxdet's small shapes detector, pretrained here on generated "
          "shapes (not COCO): expect a weaker duck detector")
    pretrain = ["train.num_steps=1500", "train.log_every=250"] if not QUICK else [
        "train.num_steps=4", "train.batch_size=2", "data.train.num_images=8",
        "model.backbone.depth_multiplier=0.25", "parallel.data=1"]
    PRETRAINED = "runs/shapes_pretrained"
    done = jaxdet.fit("shapes_demo", PRETRAINED, overrides=pretrain, evaluate=False,
                      progress=False)
    print(f"pretrained {done.step} steps on generated shapes")
    STEPS = 200  # a weaker start needs longer

# %% [markdown]
# ## Five photos and their boxes
#
# `boxes.json` holds one list of boxes per photo, normalized `[ymin, xmin, ymax, xmax]` as in
# the TF notebook. The photos are loaded as numpy arrays: `fine_tune` takes arrays, PIL
# images or paths.

# %%
annotations = json.loads((DUCKY / "boxes.json").read_text())["images"]
photos = [np.asarray(Image.open(DUCKY / "train" / name).convert("RGB")) for name in annotations]
boxes = [np.array(b, np.float32) for b in annotations.values()]


def with_boxes(image: np.ndarray, normalized_yxyx: np.ndarray) -> Image.Image:
    picture = Image.fromarray(image)
    draw = ImageDraw.Draw(picture)
    h, w = image.shape[:2]
    for y0, x0, y1, x1 in normalized_yxyx:
        draw.rectangle([x0 * w, y0 * h, x1 * w, y1 * h], outline=(255, 40, 40), width=4)
    picture.thumbnail((320, 320))
    return picture


def grid(pictures: list[Image.Image], columns: int = 5) -> Image.Image:
    cell_w = max(p.width for p in pictures)
    cell_h = max(p.height for p in pictures)
    rows = -(-len(pictures) // columns)
    sheet = Image.new("RGB", (columns * cell_w, rows * cell_h), "white")
    for k, p in enumerate(pictures):
        sheet.paste(p, ((k % columns) * cell_w, (k // columns) * cell_h))
    return sheet


display(grid([with_boxes(p, b) for p, b in zip(photos, boxes, strict=True)]))

# %% [markdown]
# ## Fine-tune
#
# 100 steps of 4 images from the zoo model, as the TF Colab's recipe (200 from the shapes
# fallback); the photos are written into the workdir as a COCO dataset, so the run resumes
# like any other (running this cell again does nothing more).

# %%
result = jaxdet.fine_tune(
    PRETRAINED, photos, boxes, "runs/ducky", class_names=["rubber ducky"],
    box_format="normalized_yxyx", steps=4 if QUICK else STEPS, batch_size=4, progress=False,
    overrides=["train.log_every=50"])
print(f"fine-tuned to step {result.step}: {result.images_per_second:.0f} img/s, "
      f"last loss {result.train_metrics.get('loss', float('nan')):.3f}")

# %% [markdown]
# ## The test frames

# %%
detector = result.detector(batch_size=8)
frames = sorted((DUCKY / "test").glob("*.jpg"), key=lambda p: int(p.stem[3:]))
frames = frames[:4] if QUICK else frames
found = detector.predict(frames, max_detections=1)
pictures = []
for detections in found:
    picture = detections.draw(score_threshold=0.3)
    picture.thumbnail((320, 320))
    pictures.append(picture)
display(grid(pictures, columns=4))
best = [round(float(d.scores[0]), 2) if len(d) else None for d in found]
print(f"a ducky scoring >= 0.3 in {sum(s is not None and s >= 0.3 for s in best)} of "
      f"{len(best)} frames; best score per frame: {best}")

# %% [markdown]
# The fine-tuned run is a workdir: `jaxdet predict --workdir runs/ducky frames/ --out out/`
# does the same from the command line, and `detector.export("ducky_onnx", format="onnx")`
# writes a serving artifact.
