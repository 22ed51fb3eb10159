"""Training end to end against the TF Object Detection API: the same pipeline.config and the
same TFRecords, ``jaxdet train`` against ``model_main_tf2.py``'s training loop, input
pipeline included; prints one JSON object.

    CONFIGS=../shared/data/tfod/configs; DATA=../shared/data/tfod
    python benchmarks/train_vs_tfod.py \\
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

The TF side runs ``benchmarks/tfod_train_peer.py`` under the TF peer's Python (``--tf-python``,
default ``$TFPY`` or ``~/tfod-peer/tfod-venv/bin/python``; sources ``--tfod-src``, default
``~/tfod-peer/tfod-src``; built by ``../shared/peer/setup_tfod.sh``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _tf_env(args) -> tuple[str, dict]:
    python = args.tf_python or os.environ.get("TFPY") or str(
        Path.home() / "tfod-peer" / "tfod-venv" / "bin" / "python")
    src = args.tfod_src or str(Path.home() / "tfod-peer" / "tfod-src")
    return python, dict(os.environ, TF_USE_LEGACY_KERAS="1", PYTHONPATH=src,
                        TF_CPP_MIN_LOG_LEVEL="2")


def _json_line(done: subprocess.CompletedProcess, what: str) -> dict:
    for line in reversed(done.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{what} failed ({done.returncode}):\n{done.stderr[-3000:]}")


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
    python, env = _tf_env(args)
    out = tmp / "pipeline.config"
    done = subprocess.run(
        [python, str(HERE / "tfod_train_peer.py"), "--pipeline-config", args.pipeline_config,
         "--write-config", str(out), "--tfrecord", *records,
         "--label-map", str(Path(args.label_map).resolve()),
         "--num-classes", str(args.num_classes), "--batch-size", str(args.batch_size)],
        capture_output=True, text=True, env=env, check=False)
    _json_line(done, "rewriting the pipeline.config with TF's config_util")
    return out


def run_tf(args, config: Path, model_dir: Path) -> dict:
    python, env = _tf_env(args)
    t0 = time.perf_counter()
    done = subprocess.run(
        [python, str(HERE / "tfod_train_peer.py"), "--pipeline-config", str(config),
         "--model-dir", str(model_dir), "--steps", str(args.steps)],
        capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    out = _json_line(done, "the TF OD API's training")
    per_step = out["per_step_seconds"]
    steady = [per_step[k] for k in per_step if int(k) > 100]
    seconds = statistics.fmean(steady)
    return {"wall_seconds": round(wall, 1), "per_step_seconds": per_step,
            "step_seconds": round(seconds, 4),
            "images_per_second": round(args.batch_size / seconds, 2)}


def run_jaxdet(args, config: Path, workdir: Path) -> dict:
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "jaxdet.app.cli", "train", "--pipeline-config", str(config),
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
    parser.add_argument("--tf-python")
    parser.add_argument("--tfod-src")
    args = parser.parse_args(argv)
    if args.steps < 200 or args.steps % 100:
        parser.error("--steps must be a multiple of 100, at least 200")
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        records = _records(args, tmp)
        config = edited_config(args, tmp, records)
        for k in range(args.rounds):
            tf_run = run_tf(args, config, tmp / f"tf_{k}")
            jaxdet_run = run_jaxdet(args, config, tmp / f"jaxdet_{k}")
            ratio = jaxdet_run["images_per_second"] / tf_run["images_per_second"]
            rounds.append({"tf": tf_run, "jaxdet": jaxdet_run, "ratio": round(ratio, 3)})
            print(json.dumps(rounds[-1]), file=sys.stderr, flush=True)
    import platform

    result = {
        "pipeline_config": Path(args.pipeline_config).name,
        "batch_size": args.batch_size, "steps": args.steps, "records": args.records,
        "machine": {"cpu_count": os.cpu_count(), "processor": platform.processor() or
                    platform.machine()},
        "rounds": rounds,
        "tf_images_per_second_median": statistics.median(
            r["tf"]["images_per_second"] for r in rounds),
        "jaxdet_images_per_second_median": statistics.median(
            r["jaxdet"]["images_per_second"] for r in rounds),
        "ratio_median": statistics.median(r["ratio"] for r in rounds),
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
