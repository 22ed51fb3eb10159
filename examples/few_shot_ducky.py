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
# The TF2 release's few-shot notebook (the "rubber ducky" detector) in jaxdet: a pretrained
# detector learns a new class from five annotated photos given in memory. `jaxdet.fine_tune`
# restores the pretrained weights (the class predictor starts fresh for the new class),
# freezes the backbone and the neck, and trains the rest.
#
# The recipe is for a COCO-pretrained model: set `PRETRAINED` to a TF2 zoo model folder
# (e.g. `ssd_mobilenet_v2_fpnlite_320x320_coco17_tpu-8`) or a jaxdet workdir. Without one,
# this notebook pretrains jaxdet's small `shapes_demo` detector on generated circles,
# squares and triangles (about two minutes on a laptop CPU): a 128-pixel toy, not a COCO
# model, so expect it to find the duck in some frames and miss it in others.
#
# The photos come with jaxdet's development data (`../shared/data/ducky` beside a clone):
# five training photos with boxes and 49 test frames.

# %%
import json
import logging
import os
from pathlib import Path

import numpy as np
from IPython.display import display
from PIL import Image, ImageDraw

import jaxdet

logging.basicConfig(format="%(message)s")  # every library's warnings, shown in the notebook
logging.getLogger("jaxdet").setLevel(logging.INFO)  # and jaxdet's progress lines
QUICK = os.environ.get("JAXDET_EXAMPLES_QUICK") == "1"  # the test suite's tiny run
PRETRAINED = None  # a TF2 zoo model folder or a jaxdet workdir
DUCKY = Path(jaxdet.__file__).resolve().parents[3] / "shared" / "data" / "ducky"
assert DUCKY.is_dir(), f"the duck photos are not at {DUCKY}"

# %% [markdown]
# ## A pretrained detector

# %%
if PRETRAINED is None:
    pretrain = ["train.num_steps=1500", "train.log_every=250"] if not QUICK else [
        "train.num_steps=4", "train.batch_size=2", "data.train.num_images=8",
        "model.backbone.depth_multiplier=0.25", "parallel.data=1"]
    PRETRAINED = "runs/shapes_pretrained"
    done = jaxdet.fit("shapes_demo", PRETRAINED, overrides=pretrain, evaluate=False,
                      progress=False)
    print(f"pretrained {done.step} steps on generated shapes")

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
# 200 steps of 4 images, as the TF notebook's recipe; the photos are written into the
# workdir as a COCO dataset, so the run resumes like any other (running this cell again
# does nothing more).

# %%
result = jaxdet.fine_tune(
    PRETRAINED, photos, boxes, "runs/ducky", class_names=["rubber ducky"],
    box_format="normalized_yxyx", steps=4 if QUICK else 200, batch_size=4, progress=False,
    overrides=["train.log_every=50"])
print(f"fine-tuned to step {result.step}: {result.images_per_second:.0f} img/s, "
      f"last loss {result.train_metrics.get('loss', float('nan')):.3f}")

# %% [markdown]
# ## The test frames

# %%
detector = result.detector(batch_size=8)
frames = sorted((DUCKY / "test").glob("*.jpg"), key=lambda p: int(p.stem[3:]))
frames = frames[:4] if QUICK else frames[::4]
found = detector.predict(frames, max_detections=1)
pictures = []
for detections in found:
    picture = detections.draw(score_threshold=0.3)
    picture.thumbnail((320, 320))
    pictures.append(picture)
display(grid(pictures, columns=4))
print("best score per frame:", [round(float(d.scores[0]), 2) if len(d) else None for d in found])

# %% [markdown]
# The fine-tuned run is a workdir: `jaxdet predict --workdir runs/ducky frames/ --out out/`
# does the same from the command line, and `detector.export("ducky_onnx", format="onnx")`
# writes a serving artifact.
