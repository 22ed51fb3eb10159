"""A learning-rate sweep against the TF Object Detection API: the accuracy benchmark
(``benchmarks.accuracy.vs_tfod``) at several cosine bases on several generated datasets, one
cell at a time, each cell kept in its own folder so a sweep stopped half-way goes on from the
cells not yet done; prints one JSON object (every cell's APs and verdict).

    CONFIGS=../shared/data/tfod/configs
    python -m benchmarks.accuracy.lr_sweep --out runs/lr_sweep \\
        --pipeline-config $CONFIGS/ssd_mobilenet_v2_320x320_coco17_tpu-8.config \\
        --datasets default:11 crowded:31 --bases 0.02 0.04 0.08 \\
        --plot docs/images/lr_sweep.png

A dataset is ``BOXES:SEED``: the generated set's object statistics (``vs_tfod --boxes``) and
the seed of its images. Each cell trains the pipeline.config from scratch on each side for
``--steps`` steps of ``--batch-size`` at cosine base ``B`` with ``--warmup-steps`` steps of
warm-up from ``B / 3``, seed 0 a side; where the two sides' APs differ by more than
``--second-seed-above`` (0.03), seed 1 a side as well. A cell's verdict is vs_tfod's: jaxdet's
mean AP at least TF's minus the larger seed spread (with one seed a side, no spread: at least
TF's minus ``--second-seed-above``, which a difference that large has been run twice to
settle). ``--cells default:11@0.08 ...`` runs those cells only; ``--report`` prints the table
of the cells done without training; ``--reuse-tf`` keeps the TF runs a cell already has (only
jaxdet trains again: a change on the jaxdet side, measured against the same TF runs).

Where TF "diverges": its AP under ``--diverged-below`` (0.05) of a cell where another base
converged; such cells say whether jaxdet diverged too.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from benchmarks import common
from benchmarks.accuracy import vs_tfod

BOX_WORDS = {"default": "1-6 objects an image", "crowded": "3-12 smaller objects an image"}


def cell_name(dataset: str, base: float) -> str:
    return f"{dataset.replace(':', '_seed')}/base_{base:g}"


def make_dataset(args: argparse.Namespace, dataset: str, root: Path) -> dict:
    """The dataset ``BOXES:SEED`` as TFRecords written by TF's converter (made once)."""
    boxes, seed = dataset.split(":")
    data_args = argparse.Namespace(**vars(args))
    data_args.boxes, data_args.data_seed = boxes, int(seed)
    return vs_tfod.make_data(data_args, root / "data")


def run_cell(args: argparse.Namespace, dataset: str, base: float, seeds: list[int]) -> dict:
    """One cell's vs_tfod result (kept in ``out/<cell>/seeds_<seeds>.json``, not run again)."""
    folder = Path(args.out) / cell_name(dataset, base)
    done = folder / f"seeds_{'_'.join(map(str, seeds))}.json"
    if done.exists():
        return json.loads(done.read_text())
    data = make_dataset(args, dataset, Path(args.out) / dataset.replace(":", "_seed"))
    argv = ["--pipeline-config", args.pipeline_config, "--out", str(folder),
            "--steps", str(args.steps), "--batch-size", str(args.batch_size),
            "--learning-rate-base", str(base), "--warmup-learning-rate", f"{base / 3:.6g}",
            "--warmup-steps", str(args.warmup_steps), "--seeds", *map(str, seeds),
            "--tfrecord", *data["tfrecord"], "--eval-tfrecord", *data["eval_tfrecord"],
            "--label-map", data["label_map"], "--num-classes", str(data["num_classes"])]
    if args.drop_bfloat16:
        argv.append("--drop-bfloat16")
    if args.reuse_tf:
        argv.append("--reuse")
    if args.tf_python:
        argv += ["--tf-python", args.tf_python]
    if args.tfod_src:
        argv += ["--tfod-src", args.tfod_src]
    result = vs_tfod.main(argv)
    # the records came from here: vs_tfod's own data fields (its defaults) do not describe them
    for key in ("data_seed", "boxes"):
        result.pop(key, None)
    result["dataset"] = dataset
    done.write_text(json.dumps(result, indent=1))
    return result


def cell_summary(dataset: str, base: float, results: list[dict], margin: float) -> dict:
    """A cell's APs (every seed of both sides) and verdict."""
    tf = [r["AP"] for res in results for r in res["runs"]["tf"]]
    jx = [r["AP"] for res in results for r in res["runs"]["jaxdet"]]
    spread = max(max(tf) - min(tf), max(jx) - min(jx))
    allowed = spread if len(tf) > 1 else margin
    return {"dataset": dataset, "base": base, "tf_AP": tf, "jaxdet_AP": jx,
            "tf_AP_by_jaxdet_eval": [r["AP_by_jaxdet_eval"] for res in results
                                     for r in res["runs"]["tf"]],
            "tf_mean": round(statistics.fmean(tf), 4),
            "jaxdet_mean": round(statistics.fmean(jx), 4),
            "allowed_below_tf": round(allowed, 4),
            "meets_target": statistics.fmean(jx) >= statistics.fmean(tf) - allowed,
            "train_seconds": {side: [r["train_seconds"] for res in results
                                     for r in res["runs"][side]] for side in ("tf", "jaxdet")}}


def mark_divergence(cells: list[dict], below: float) -> None:
    """``tf_diverged`` / ``jaxdet_diverged`` on the cells of a dataset where another base
    converged (its AP at least ``below``)."""
    for cell in cells:
        others = [c for c in cells if c["dataset"] == cell["dataset"]]
        for side in ("tf", "jaxdet"):
            converged_elsewhere = any(c[f"{side}_mean"] >= below for c in others)
            cell[f"{side}_diverged"] = converged_elsewhere and cell[f"{side}_mean"] < below


def table(cells: list[dict]) -> str:
    """The cells as a Markdown table (the results page's)."""
    rows = ["| dataset | cosine base | TF AP | jaxdet AP | TF's checkpoint, jaxdet's eval "
            "| jaxdet - TF | meets target |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for c in cells:
        rows.append(
            f"| {c['dataset']} | {c['base']:g} | {', '.join(f'{a:.3f}' for a in c['tf_AP'])} "
            f"| {', '.join(f'{a:.3f}' for a in c['jaxdet_AP'])} "
            f"| {', '.join(f'{a:.3f}' for a in c['tf_AP_by_jaxdet_eval'])} "
            f"| {c['jaxdet_mean'] - c['tf_mean']:+.3f} | {'yes' if c['meets_target'] else 'no'} |")
    return "\n".join(rows)


def plot(cells: list[dict], path: Path) -> None:
    """AP against the cosine base, one panel per dataset, every run a dot and each side's
    mean a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = sorted({c["dataset"] for c in cells})
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.4),
                             squeeze=False, sharey=True)
    for ax, dataset in zip(axes[0], datasets, strict=True):
        mine = sorted((c for c in cells if c["dataset"] == dataset), key=lambda c: c["base"])
        bases = [c["base"] for c in mine]
        for side, color, label in (("tf", "tab:orange", "TF OD API"),
                                   ("jaxdet", "tab:blue", "jaxdet")):
            ax.plot(bases, [c[f"{side}_mean"] for c in mine], "-", color=color, label=label)
            for c in mine:
                ax.plot([c["base"]] * len(c[f"{side}_AP"]), c[f"{side}_AP"], "o",
                        color=color, markersize=4)
        ax.set_xscale("log", base=2)
        ax.set_xticks(bases, [f"{b:g}" for b in bases])
        ax.minorticks_off()
        ax.set_xlabel("cosine learning-rate base")
        boxes, seed = dataset.split(":")
        ax.set_title(f"generated set: {BOX_WORDS.get(boxes, boxes)}, seed {seed}", fontsize=10)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("COCO AP (held-out)")
    axes[0][0].legend(loc="lower left", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline-config", required=True)
    parser.add_argument("--out", required=True, help="a folder for the data and the cells")
    parser.add_argument("--datasets", nargs="+", default=["default:11", "crowded:31"],
                        help="BOXES:SEED (boxes: vs_tfod --boxes)")
    parser.add_argument("--bases", type=float, nargs="+", default=[0.02, 0.04, 0.08])
    parser.add_argument("--cells", nargs="+", help="DATASET@BASE: run these cells only")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--warmup-steps", type=int, default=200)
    parser.add_argument("--train-images", type=int, default=800)
    parser.add_argument("--val-images", type=int, default=150)
    parser.add_argument("--second-seed-above", type=float, default=0.03)
    parser.add_argument("--diverged-below", type=float, default=0.05)
    parser.add_argument("--drop-bfloat16", action="store_true")
    parser.add_argument("--reuse-tf", action="store_true",
                        help="TF runs already trained in a cell are evaluated again, not "
                             "retrained (to measure a change on the jaxdet side)")
    parser.add_argument("--report", action="store_true",
                        help="only summarize the cells already done")
    parser.add_argument("--plot", type=Path, help="write the AP-vs-base plot here (PNG)")
    common.add_tf_peer_arguments(parser)
    args = parser.parse_args(argv)
    for dataset in args.datasets:
        if dataset.split(":")[0] not in vs_tfod.BOX_STATISTICS or ":" not in dataset:
            parser.error(f"--datasets {dataset!r}: expected BOXES:SEED with BOXES one of "
                         f"{sorted(vs_tfod.BOX_STATISTICS)}, e.g. default:11")
    wanted = [(d, b) for d in args.datasets for b in args.bases]
    if args.cells:
        wanted = [(c.split("@")[0], float(c.split("@")[1])) for c in args.cells]
    cells = []
    for dataset, base in wanted:
        folder = Path(args.out) / cell_name(dataset, base)
        if args.report:
            results = [json.loads(p.read_text()) for p in sorted(folder.glob("seeds_*.json"))]
            if not results:
                continue
        else:
            results = [run_cell(args, dataset, base, [0])]
            tf_ap, jx_ap = results[0]["runs"]["tf"][0]["AP"], results[0]["runs"]["jaxdet"][0]["AP"]
            if abs(tf_ap - jx_ap) > args.second_seed_above:
                results.append(run_cell(args, dataset, base, [1]))
        cells.append(cell_summary(dataset, base, results, args.second_seed_above))
        common.report_progress(cell_name(dataset, base), cells[-1])
    mark_divergence(cells, args.diverged_below)
    if args.plot and cells:
        plot(cells, args.plot)
    result = {"benchmark": "accuracy_lr_sweep", "pipeline_config": Path(args.pipeline_config).name,
              "steps": args.steps, "batch_size": args.batch_size,
              "warmup": f"{args.warmup_steps} steps from base / 3",
              "machine": common.machine_info(devices=False), "cells": cells,
              "table": table(cells)}
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
