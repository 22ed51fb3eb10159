"""Accuracy against the TF Object Detection API: one pipeline.config trained from scratch by
both frameworks on the same TFRecords, each side's final checkpoint evaluated by its own
evaluator, several seeds per side; prints one JSON object (AP of every run).

    CONFIGS=../shared/data/tfod/configs
    python -m benchmarks.accuracy.vs_tfod --out runs/accuracy_ssd \\
        --pipeline-config $CONFIGS/ssd_mobilenet_v2_320x320_coco17_tpu-8.config \\
        --steps 2000 --batch-size 8 --learning-rate-base 0.02 --warmup-learning-rate 0.0067 \\
        --warmup-steps 200 --seeds 0 1

The data, unless ``--tfrecord`` / ``--eval-tfrecord`` / ``--label-map`` name a user's own: a
generated COCO set as a new user brings one (``--train-images`` / ``--val-images`` shape
images of 240-520 px in 4 classes; JPEGs, every sixth a grayscale PNG and every sixth an RGBA
PNG, 3% of the boxes ``iscrowd``; ``--boxes crowded`` draws 3-12 smaller objects an image
instead of 1-6, ``--data-seed`` other images), converted by TF's own
``dataset_tools/create_coco_tf_record.py``. The pipeline.config is edited as a tutorial
does, by TF's ``config_util`` (``benchmarks.peers.tfod_train --write-config``): the records,
label map, class count, batch size, ``num_steps``, the cosine schedule's base, warm-up and
total steps, no fine-tune checkpoint; ``use_bfloat16`` stays as shipped (both frameworks
apply it on TPUs only; ``--drop-bfloat16`` writes ``false``). Both sides train that one file
as it is.

Per seed: TF trains with ``model_lib_v2.train_loop`` (``model_main_tf2.py``'s loop; seeded by
``tf.keras.utils.set_random_seed``) and evaluates its final checkpoint with its own
``eager_eval_loop`` (pycocotools), and ``jaxdet eval --pipeline-config --checkpoint``
evaluates that same TF checkpoint (``AP_by_jaxdet_eval``: evaluation parity); jaxdet runs
``jaxdet train --pipeline-config`` (``--set train.seed=S``), then ``jaxdet eval``. The runs
take turns (TF, then jaxdet, for each seed). The verdict: jaxdet's mean AP >= TF's mean AP
minus the larger side's seed spread (max - min).

**Fine-tuning** (``--fine-tune-checkpoint CKPT``, ``--fine-tune-checkpoint-type``, default
``detection``): the pipeline.config starts from a TF detection checkpoint (e.g. one TF trained
on the default generated set) and both sides fine-tune it on another generated set
(``--data-seed``: other images and boxes; ``--train-images`` a few dozen), each restoring what
its ``fine_tune_checkpoint_type`` says:

    python -m benchmarks.accuracy.vs_tfod --out runs/fine_tune --pipeline-config \
        $CONFIGS/ssd_mobilenet_v2_320x320_coco17_tpu-8.config --fine-tune-checkpoint \
        runs/accuracy_ssd/tf_seed0/ckpt-3 --data-seed 21 --train-images 48 --val-images 60 \
        --steps 300 --learning-rate-base 0.02 --warmup-learning-rate 0.0067 --warmup-steps 30

The TF side runs under the TF peer's Python (``--tf-python``, default ``$TFPY`` or
``~/tfod-peer/tfod-venv/bin/python``; sources ``--tfod-src``, default
``~/tfod-peer/tfod-src``; built by ``../shared/peer/setup_tfod.sh``). ``--sides jaxdet`` skips
TF (to test a change on the jaxdet side against TF figures already measured).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import common
from benchmarks.accuracy.own_data_recipe import make_user_dataset

CLASSES = ("circle", "square", "triangle", "star")
# --boxes: the generated set's object statistics (generate_shapes' options)
BOX_STATISTICS = {
    "default": {},  # 1-6 objects an image, each 5-60% of the image's side
    "crowded": {"min_objects": 3, "max_objects": 12, "min_size_frac": 0.04,
                "max_size_frac": 0.3},  # 3-12 smaller objects
}


def make_data(args, root: Path) -> dict:
    """The generated COCO set as TFRecords written by TF's converter -> record paths."""
    records = root / "records"
    done = records / "done.json"
    if done.exists():
        return json.loads(done.read_text())
    boxes = BOX_STATISTICS[args.boxes]
    make_user_dataset(root, "train", args.train_images, seed=args.data_seed,
                      num_classes=len(CLASSES), **boxes)
    make_user_dataset(root, "val", args.val_images, seed=args.data_seed + 1,
                      num_classes=len(CLASSES), **boxes)
    python, env = common.tf_peer(args)
    tool = common.tfod_sources(env) / "object_detection" / "dataset_tools" / \
        "create_coco_tf_record.py"
    records.mkdir(parents=True, exist_ok=True)
    subprocess.run([python, str(tool), f"--train_image_dir={root / 'train'}",
                    f"--val_image_dir={root / 'val'}", f"--test_image_dir={root / 'val'}",
                    f"--train_annotations_file={root / 'train.json'}",
                    f"--val_annotations_file={root / 'val.json'}",
                    f"--testdev_annotations_file={root / 'val.json'}",
                    f"--output_dir={records}"], env=env, check=True, capture_output=True)
    label_map = root / "label_map.pbtxt"
    label_map.write_text("".join(f"item {{ id: {i + 1} name: '{name}' }}\n"
                                 for i, name in enumerate(CLASSES)))
    out = {"tfrecord": [str(p) for p in sorted(records.glob("coco_train.record-*"))],
           "eval_tfrecord": [str(p) for p in sorted(records.glob("coco_val.record-*"))],
           "label_map": str(label_map), "num_classes": len(CLASSES)}
    done.write_text(json.dumps(out))
    return out


def write_config(args, data: dict, out: Path) -> Path:
    python, env = common.tf_peer(args)
    config = out / "pipeline.config"
    argv = common.peer_command(
        python, "tfod_train", "--pipeline-config", str(Path(args.pipeline_config).resolve()),
        "--write-config", str(config), "--tfrecord", *data["tfrecord"], "--eval-tfrecord",
        *data["eval_tfrecord"], "--label-map", data["label_map"], "--num-classes",
        str(data["num_classes"]), "--batch-size", str(args.batch_size), "--num-steps",
        str(args.steps))
    if not args.drop_bfloat16:
        argv.append("--keep-bfloat16")
    if args.fine_tune_checkpoint:
        argv += ["--fine-tune-checkpoint", str(Path(args.fine_tune_checkpoint).resolve()),
                 "--fine-tune-checkpoint-type", args.fine_tune_checkpoint_type]
    for name in ("learning_rate_base", "warmup_learning_rate", "warmup_steps"):
        value = getattr(args, name)
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    common.run_json(argv, env, what="editing the pipeline.config with TF's config_util")
    return config


def run_tf(args, config: Path, model_dir: Path, seed: int) -> dict:
    python, env = common.tf_peer(args)
    t0 = time.perf_counter()
    if not (args.reuse and (model_dir / "checkpoint").exists()):
        shutil.rmtree(model_dir, ignore_errors=True)
        common.run_json(common.peer_command(
            python, "tfod_train", "--pipeline-config", str(config), "--model-dir",
            str(model_dir), "--steps", str(args.steps), "--seed", str(seed)), env,
            what="the TF OD API's training")
    train_s = time.perf_counter() - t0
    result = common.run_json(common.peer_command(
        python, "tfod_train", "--pipeline-config", str(config), "--evaluate", str(model_dir)),
        env, what="the TF OD API's evaluation")
    metrics = result["metrics"]
    return {"seed": seed, "step": result["step"],
            "AP": round(metrics["DetectionBoxes_Precision/mAP"], 4),
            "AP50": round(metrics["DetectionBoxes_Precision/mAP@.50IOU"], 4),
            "train_seconds": round(train_s, 1),
            "AP_by_jaxdet_eval": jaxdet_eval_of_tf(config, model_dir)}


def jaxdet_eval_of_tf(config: Path, model_dir: Path) -> float:
    """TF's final checkpoint evaluated by ``jaxdet eval --pipeline-config --checkpoint``, the
    config as both sides trained it, nothing overridden: its COCO AP."""
    name = (model_dir / "checkpoint").read_text().split('"')[1]  # model_checkpoint_path
    out = model_dir / "jaxdet_eval"
    shutil.rmtree(out, ignore_errors=True)
    done = subprocess.run([sys.executable, "-m", "jaxdet.cli.main", "eval", "--pipeline-config",
                           str(config), "--checkpoint", str(model_dir / name), "--out",
                           str(out), "--no-progress"], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"jaxdet eval of TF's checkpoint failed ({done.returncode}):\n"
                           f"{done.stderr[-3000:]}")
    return round(json.loads((out / "metrics.json").read_text())["AP"], 4)


def run_jaxdet(args, config: Path, workdir: Path, seed: int) -> dict:
    shutil.rmtree(workdir, ignore_errors=True)
    t0 = time.perf_counter()
    sets = [x for s in [f"train.seed={seed}", *args.overrides] for x in ("--set", s)]
    done = subprocess.run([sys.executable, "-m", "jaxdet.cli.main", "train", "--pipeline-config",
                           str(config), "--workdir", str(workdir), "--no-eval", "--no-progress",
                           *sets], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"jaxdet train failed ({done.returncode}):\n{done.stderr[-3000:]}")
    train_s = time.perf_counter() - t0
    done = subprocess.run([sys.executable, "-m", "jaxdet.cli.main", "eval", "--workdir",
                           str(workdir), "--no-progress"], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"jaxdet eval failed ({done.returncode}):\n{done.stderr[-3000:]}")
    metrics = json.loads(next(workdir.glob("eval/step_*/metrics.json")).read_text())
    return {"seed": seed, "AP": round(metrics["AP"], 4), "AP50": round(metrics["AP50"], 4),
            "train_seconds": round(train_s, 1)}


def summary(runs: list[dict]) -> dict:
    aps = [r["AP"] for r in runs]
    return {"AP_mean": round(statistics.fmean(aps), 4),
            "AP_spread": round(max(aps) - min(aps), 4)} if aps else {}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline-config", required=True)
    parser.add_argument("--out", required=True, help="a folder for the data, configs and runs")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--learning-rate-base", type=float)
    parser.add_argument("--warmup-learning-rate", type=float)
    parser.add_argument("--warmup-steps", type=int)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--sides", nargs="+", default=["tf", "jaxdet"],
                        choices=["tf", "jaxdet"])
    parser.add_argument("--train-images", type=int, default=800)
    parser.add_argument("--val-images", type=int, default=150)
    parser.add_argument("--tfrecord", nargs="+", help="the user's own training records")
    parser.add_argument("--eval-tfrecord", nargs="+")
    parser.add_argument("--label-map")
    parser.add_argument("--num-classes", type=int)
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="jaxdet overrides for every jaxdet run")
    parser.add_argument("--tag", default="", help="suffix of the jaxdet run folders")
    parser.add_argument("--drop-bfloat16", action="store_true",
                        help="write use_bfloat16: false (default: as shipped; TF and jaxdet "
                             "apply it on TPUs only)")
    parser.add_argument("--data-seed", type=int, default=11,
                        help="seed of the generated training images (validation: +1)")
    parser.add_argument("--boxes", default="default", choices=sorted(BOX_STATISTICS),
                        help="the generated set's objects: default 1-6 an image of 5-60%% of "
                             "its side; crowded 3-12 of 4-30%%")
    parser.add_argument("--fine-tune-checkpoint",
                        help="a TF detection checkpoint both sides start from")
    parser.add_argument("--fine-tune-checkpoint-type", default="detection",
                        choices=["detection", "classification", "full"])
    parser.add_argument("--reuse", action="store_true",
                        help="evaluate TF runs already trained in --out again, do not retrain")
    common.add_tf_peer_arguments(parser)
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.tfrecord:
        data = {"tfrecord": [str(Path(p).resolve()) for p in args.tfrecord],
                "eval_tfrecord": [str(Path(p).resolve()) for p in
                                  (args.eval_tfrecord or args.tfrecord)],
                "label_map": str(Path(args.label_map).resolve()),
                "num_classes": args.num_classes}
    else:
        data = make_data(args, out / "data")
    config = write_config(args, data, out)
    runs: dict[str, list[dict]] = {"tf": [], "jaxdet": []}
    for seed in args.seeds:  # by turns: TF, then jaxdet, for each seed
        if "tf" in args.sides:
            runs["tf"].append(run_tf(args, config, out / f"tf_seed{seed}", seed))
            common.report_progress("tf", runs["tf"][-1])
        if "jaxdet" in args.sides:
            workdir = out / f"jaxdet_seed{seed}{args.tag}"
            runs["jaxdet"].append(run_jaxdet(args, config, workdir, seed))
            common.report_progress("jaxdet", runs["jaxdet"][-1])
    result = {
        "benchmark": "accuracy_vs_tfod",
        "pipeline_config": Path(args.pipeline_config).name,
        "data": "user records" if args.tfrecord else
                f"generated COCO ({args.train_images} train / {args.val_images} val, "
                "create_coco_tf_record.py)",
        "steps": args.steps, "batch_size": args.batch_size, "overrides": args.overrides,
        "fine_tune_checkpoint": args.fine_tune_checkpoint and {
            "path": args.fine_tune_checkpoint, "type": args.fine_tune_checkpoint_type},
        "data_seed": args.data_seed, "boxes": args.boxes,
        "machine": common.machine_info(devices=False),
        "runs": runs,
        **{f"{side}_{k}": v for side in runs for k, v in summary(runs[side]).items()},
    }
    if runs["tf"] and runs["jaxdet"]:
        tf_sum, jx_sum = summary(runs["tf"]), summary(runs["jaxdet"])
        margin = max(tf_sum["AP_spread"], jx_sum["AP_spread"])
        result["target"] = "jaxdet AP_mean >= tf AP_mean - max spread"
        result["meets_target"] = jx_sum["AP_mean"] >= tf_sum["AP_mean"] - margin
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
