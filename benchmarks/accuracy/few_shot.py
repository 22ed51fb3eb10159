"""Few-shot fine-tuning, the TF2 "rubber ducky" recipe, on generated shapes.

A detector pretrained on circles, squares and triangles learns a new class, the star, from 5
training images: ``train.init_checkpoint`` restores the pretrained detector with
``restore: detection`` (the class predictor, now for 1 class, starts fresh), the backbone and
neck are frozen as the recipe freezes everything but the box predictor, and it trains 200
steps. The same 5 images and steps from scratch (nothing restored, nothing frozen) are the
baseline. Both are evaluated on 100 held-out images where only stars are labelled (the other
shapes are there, unlabelled, as in a photo). Prints one JSON object.

    python -m benchmarks.accuracy.few_shot --out runs/few_shot   # ~8 min on a 2-core CPU
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks import common
from jaxdet.config.loader import load_config
from jaxdet.data.shapes import SHAPE_NAMES, generate_shapes
from jaxdet.jobs import runs

NEW_CLASS = "star"


def star_dataset(root: Path, num_images: int, seed: int, limit: int | None = None) -> Path:
    """COCO JSON of generated 128-px images holding the first four shapes, where only the
    stars are labelled (category 1); images without a star are left out; at most ``limit``."""
    ann = json.loads(generate_shapes(root / "all", num_images, image_size=(128, 128), seed=seed,
                                     num_classes=4, max_objects=5).read_text())
    star = SHAPE_NAMES.index(NEW_CLASS) + 1
    boxes = {}
    for a in ann["annotations"]:
        if a["category_id"] == star:
            boxes.setdefault(a["image_id"], []).append(dict(a, category_id=1))
    images = [im for im in ann["images"] if im["id"] in boxes][:limit]
    keep = {im["id"] for im in images}
    out = {"images": images, "categories": [{"id": 1, "name": NEW_CLASS}],
           "annotations": [a for i in sorted(keep) for a in boxes[i]]}
    path = root / "stars.json"
    path.write_text(json.dumps(out))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/few_shot")
    parser.add_argument("--pretrain-steps", type=int, default=1500)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--shots", type=int, default=5)
    args = parser.parse_args()
    out = Path(args.out).absolute()
    t0 = time.perf_counter()

    pretrain = load_config("shapes_demo", [f"train.num_steps={args.pretrain_steps}",
                                           "parallel.data=1"])
    runs.train(pretrain, out / "pretrain", evaluate=False)
    pretrain_s = time.perf_counter() - t0

    train_json = star_dataset(out / "data_train", 40, seed=21, limit=args.shots)
    eval_json = star_dataset(out / "data_eval", 200, seed=22, limit=100)
    shared = [
        "model.num_classes=1", "parallel.data=1", f"train.num_steps={args.steps}",
        f"data.train={{type: coco, annotation_file: {train_json}, "
        f"image_dir: {train_json.parent / 'all' / 'images'}}}",
        f"data.eval={{type: coco, annotation_file: {eval_json}, "
        f"image_dir: {eval_json.parent / 'all' / 'images'}}}",
        "train.batch_size=4", "train.checkpoint_every=100", "eval.batch_size=20",
        "train.learning_rate={name: cosine, learning_rate_base: 0.002, "
        "warmup_learning_rate: 0.0002, warmup_steps: 20}",
    ]
    fine = load_config("shapes_demo", [
        *shared, f"train.init_checkpoint={{path: {out / 'pretrain'}, restore: detection}}",
        "train.freeze_variables=['^backbone/', '^neck/']"])
    scratch = load_config("shapes_demo", shared)
    results = {}
    for name, config in (("fine_tuned", fine), ("from_scratch", scratch)):
        _, seconds = common.timed(lambda config=config, name=name: runs.train(config, out / name))
        metrics = json.loads((out / name / "eval" / f"step_{args.steps}" / "metrics.json")
                             .read_text())
        results[name] = {"AP": round(metrics["AP"], 3), "AP50": round(metrics["AP50"], 3),
                         "seconds": round(seconds, 1)}
    ratio = results["fine_tuned"]["AP"] / max(results["from_scratch"]["AP"], 1e-3)
    print(json.dumps({"benchmark": "few_shot", "new_class": NEW_CLASS, "shots": args.shots,
                      "steps": args.steps, "pretrain_steps": args.pretrain_steps,
                      "pretrain_seconds": round(pretrain_s, 1), **results,
                      "ap_ratio": round(ratio, 2), "machine": common.machine_info()}))


if __name__ == "__main__":
    main()
