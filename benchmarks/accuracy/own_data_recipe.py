"""The manual's CPU recipe for one's own data (docs/guides/choosing_a_config.md), run
verbatim on a generated "user" dataset.

Makes what a new user brings: a COCO train/val split of shape images of 240-520 px (JPEG, with
every sixth image a grayscale PNG and every sixth an RGBA PNG, and 3% of the boxes marked
``iscrowd``), then takes the YAML block of that page that starts with
``# my_detector_cpu.yaml``, points its ``/data/...`` paths at the generated files, and runs the
page's commands on it: ``jaxdet summary --data``, ``jaxdet train``, ``jaxdet eval``,
``jaxdet predict``. Prints one JSON object (held-out AP, wall times, img/s).

    python -m benchmarks.accuracy.own_data_recipe --out runs/own_data   # ~20 min, 2-core CPU
    python -m benchmarks.accuracy.own_data_recipe --out /tmp/x --set train.num_steps=50  # smoke
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

from benchmarks import common
from jaxdet.data.shapes import generate_shapes

README = common.ROOT / "docs" / "guides" / "choosing_a_config.md"
MARKER = "# my_detector_cpu.yaml"


def make_user_dataset(root: Path, split: str, num_images: int, seed: int,
                      num_classes: int = 3, **boxes: float) -> Path:
    """``root/<split>.json`` + ``root/<split>/`` images as described in the module docstring.
    ``boxes``: ``generate_shapes``' object options (``min_objects``, ``max_objects``,
    ``min_size_frac``, ``max_size_frac``) in place of its defaults (1-6 objects)."""
    out = root / f"gen_{split}"
    shapes = {"max_objects": 6, **boxes}
    ann = json.loads(generate_shapes(out, num_images, image_size=((240, 520), (240, 520)),
                                     seed=seed, num_classes=num_classes, **shapes).read_text())
    images_dir = root / split
    images_dir.mkdir(parents=True, exist_ok=True)
    for k, entry in enumerate(ann["images"]):
        image = Image.open(out / "images" / entry["file_name"]).convert("RGB")
        stem = Path(entry["file_name"]).stem
        if k % 6 == 1:
            entry["file_name"] = f"{stem}.png"
            image.convert("L").save(images_dir / entry["file_name"])
        elif k % 6 == 4:
            entry["file_name"] = f"{stem}.png"
            rgba = image.convert("RGBA")
            rgba.putalpha(200)
            rgba.save(images_dir / entry["file_name"])
        else:
            image.save(images_dir / entry["file_name"], quality=90)
    rng = np.random.default_rng(seed)
    for a in ann["annotations"]:
        a["iscrowd"] = int(rng.random() < 0.03)
    path = root / f"{split}.json"
    path.write_text(json.dumps(ann))
    return path


def readme_recipe(data_root: Path) -> str:
    """The CPU recipe block, its /data/ paths pointed at ``data_root``."""
    for block in re.findall(r"```yaml\n(.*?)```", README.read_text(), flags=re.S):
        lines = block.splitlines()
        if lines and lines[0].strip().startswith(MARKER):
            text = "\n".join(line[3:] if line.startswith("   ") else line for line in lines)
            return text.replace("/data/", f"{data_root}/") + "\n"
    raise SystemExit(f"no ```yaml block starting with {MARKER!r} in {README}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/own_data_recipe")
    parser.add_argument("--train-images", type=int, default=600)
    parser.add_argument("--val-images", type=int, default=150)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()

    from jaxdet.cli.main import main as jaxdet

    out = Path(args.out).resolve()
    data = out / "data"
    t0 = time.perf_counter()
    make_user_dataset(data, "train", args.train_images, seed=11)
    make_user_dataset(data, "val", args.val_images, seed=12)
    config = out / "my_detector_cpu.yaml"
    config.write_text(readme_recipe(data))
    sets = [arg for item in args.overrides for arg in ("--set", item)]
    timings = {"generate_s": round(time.perf_counter() - t0, 1)}
    steps = [
        ("summary", ["summary", "--config", str(config), *sets, "--no-flops"]),
        ("train", ["train", "--config", str(config), "--workdir", str(out / "run"), *sets]),
        ("eval", ["eval", "--workdir", str(out / "run"), "--out", str(out / "eval")]),
        ("predict", ["predict", "--workdir", str(out / "run"), str(data / "val"),
                     "--out", str(out / "predictions")]),
    ]
    for name, argv in steps:
        t = time.perf_counter()
        code = jaxdet(argv)
        timings[f"{name}_s"] = round(time.perf_counter() - t, 1)
        if code:
            sys.exit(f"jaxdet {' '.join(argv)} exited {code}")
    metrics = json.loads((out / "eval" / "metrics.json").read_text())
    rows = [json.loads(x) for x in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    rate = [r["metrics"]["train/images_per_second"] for r in rows
            if "train/images_per_second" in r["metrics"]][-1]
    print(json.dumps({"benchmark": "own_data_recipe", "config": str(config),
                      "overrides": args.overrides, "train_images": args.train_images,
                      "val_images": args.val_images, "AP": round(metrics["AP"], 3),
                      "AP50": round(metrics["AP50"], 3), "per_class_AP": metrics["per_class_AP"],
                      "train_images_per_second": round(rate, 1), **timings,
                      "machine": common.machine_info()}))


if __name__ == "__main__":
    main()
