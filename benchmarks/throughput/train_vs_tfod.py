"""Training end to end against the TF Object Detection API: the same pipeline.config and the
same TFRecords, ``jaxdet train`` against ``model_main_tf2.py``'s training loop, input
pipeline included; prints one JSON object.

    CONFIGS=../shared/data/tfod/configs; DATA=../shared/data/tfod
    python -m benchmarks.throughput.train_vs_tfod \\
        --pipeline-config $CONFIGS/ssd_mobilenet_v2_320x320_coco17_tpu-8.config \\
        --tfrecord $DATA/pets_examples.record --records 260 \\
        --label-map $DATA/label_maps/pet_label_map.pbtxt --num-classes 37 \\
        --batch-size 8 --rounds 3

The pipeline.config is rewritten once by TF's own ``config_util`` (the TFRecord, label map,
class count and batch size given here, no fine-tune checkpoint, ``use_bfloat16: false``: fp32
on both sides), and both frameworks train from that one file, in fresh processes, TF then
jaxdet in each round (by turns), ``--steps`` steps each (a multiple of 100). The figure per
side is the steady training rate over steps 101..``--steps``: TF's ``model_lib_v2`` runs 100
steps per ``tf.function`` call and logs each block's time (the first block includes tracing);
jaxdet logs every 100 steps (``train.log_every=100``) with a timestamp in ``metrics.jsonl``.
Neither checkpoints inside the window (TF: ``checkpoint_every_n`` beyond the run; jaxdet:
``train.checkpoint_every=100000``); jaxdet does not evaluate (``--no-eval``). Each side uses
its defaults otherwise: TF's threads and tf.data; jaxdet's loader (``data.worker_count``
auto), allocator and CPU kernels. Ratio = jaxdet's images per second / TF's, per round; the
median is the figure.

The TF side runs ``benchmarks.peers.tfod_train`` under the TF peer's Python (``--tf-python``,
default ``$TFPY`` or ``~/tfod-peer/tfod-venv/bin/python``; sources ``--tfod-src``, default
``~/tfod-peer/tfod-src``; built by ``../shared/peer/setup_tfod.sh``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import common


def _records(args, tmp: Path) -> list[str]:
    """The TFRecord files both sides read: the given ones, repeated record by record up to
    ``--records`` when set."""
    from jaxdet.data.tfrecord import iter_tfrecord, write_tfrecord

    paths = [str(Path(p).resolve()) for p in args.tfrecord]
    if not args.records:
        return paths
    raw = [data for path in paths for _, data in iter_tfrecord(path)]
    out = tmp / "records.tfrecord"
    write_tfrecord(out, (raw[i % len(raw)] for i in range(args.records)))
    return [str(out)]


def edited_config(args, tmp: Path, records: list[str]) -> Path:
    """The pipeline.config both sides train from (see the module docstring)."""
    python, env = common.tf_peer(args)
    out = tmp / "pipeline.config"
    common.run_json(common.peer_command(
        python, "tfod_train", "--pipeline-config", str(Path(args.pipeline_config).resolve()),
        "--write-config", str(out), "--tfrecord", *records,
        "--label-map", str(Path(args.label_map).resolve()),
        "--num-classes", str(args.num_classes), "--batch-size", str(args.batch_size)),
        env, what="rewriting the pipeline.config with TF's config_util")
    return out


def run_tf(args, config: Path, model_dir: Path) -> dict:
    python, env = common.tf_peer(args)
    out, wall = common.timed(lambda: common.run_json(common.peer_command(
        python, "tfod_train", "--pipeline-config", str(config), "--model-dir", str(model_dir),
        "--steps", str(args.steps)), env, what="the TF OD API's training"))
    per_step = out["per_step_seconds"]
    steady = [per_step[k] for k in per_step if int(k) > 100]
    seconds = sum(steady) / len(steady)
    return {"wall_seconds": round(wall, 1), "per_step_seconds": per_step,
            "step_seconds": round(seconds, 4),
            "images_per_second": round(args.batch_size / seconds, 2)}


def run_jaxdet(args, config: Path, workdir: Path) -> dict:
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "jaxdet.cli.main", "train", "--pipeline-config", str(config),
         "--workdir", str(workdir), "--no-eval", "--no-progress",
         "--set", f"train.num_steps={args.steps}", "--set", "train.log_every=100",
         "--set", "train.checkpoint_every=100000", *[x for s in args.overrides
                                                      for x in ("--set", s)]],
        capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"jaxdet train failed ({done.returncode}):\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    stamps = {r["step"]: r["time"] for r in rows if "train/loss" in r["metrics"]}
    seconds = (stamps[args.steps] - stamps[100]) / (args.steps - 100)
    return {"wall_seconds": round(wall, 1), "step_seconds": round(seconds, 4),
            "images_per_second": round(args.batch_size / seconds, 2)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline-config", required=True)
    parser.add_argument("--tfrecord", required=True, nargs="+")
    parser.add_argument("--records", type=int, default=0,
                        help="repeat the records up to this many (0: as they are)")
    parser.add_argument("--label-map", required=True)
    parser.add_argument("--num-classes", type=int, required=True)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200,
                        help="steps per run, a multiple of 100 (timed: 101..steps)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="more jaxdet overrides (e.g. data.worker_count=0)")
    common.add_tf_peer_arguments(parser)
    args = parser.parse_args(argv)
    if args.steps < 200 or args.steps % 100:
        parser.error("--steps must be a multiple of 100, at least 200")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        records = _records(args, tmp)
        config = edited_config(args, tmp, records)
        fresh = itertools.count()  # a fresh model_dir / workdir per run
        runs = common.by_turns({"tf": lambda: run_tf(args, config, tmp / f"tf_{next(fresh)}"),
                                "jaxdet": lambda: run_jaxdet(args, config,
                                                             tmp / f"jaxdet_{next(fresh)}")},
                               args.rounds, report=common.report_progress)
    rounds = [{"tf": tf_run, "jaxdet": jaxdet_run,
               "ratio": round(jaxdet_run["images_per_second"] / tf_run["images_per_second"], 3)}
              for tf_run, jaxdet_run in zip(runs["tf"], runs["jaxdet"], strict=True)]
    result = {
        "pipeline_config": Path(args.pipeline_config).name,
        "batch_size": args.batch_size, "steps": args.steps, "records": args.records,
        "machine": common.machine_info(devices=False),
        "rounds": rounds,
        "tf_images_per_second_median": common.median(
            r["tf"]["images_per_second"] for r in rounds),
        "jaxdet_images_per_second_median": common.median(
            r["jaxdet"]["images_per_second"] for r in rounds),
        "ratio_median": common.median(r["ratio"] for r in rounds),
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
