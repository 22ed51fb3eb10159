"""Launch to first step: how long ``jaxdet train`` takes from the command to its first
finished training step, on a pipeline.config as shipped; prints one JSON object.

    CONFIGS=../shared/data/tfod/configs; DATA=../shared/data/tfod
    python -m benchmarks.throughput.startup \\
        --pipeline-config $CONFIGS/ssd_mobilenet_v2_320x320_coco17_tpu-8.config \\
            $CONFIGS/ssd_resnet50_v1_fpn_640x640_coco17_tpu-8.config \\
            $CONFIGS/ssd_efficientdet_d0_512x512_coco17_tpu-8.config \\
        --tfrecord $DATA/pets_examples.record \\
        --label-map $DATA/label_maps/pet_label_map.pbtxt --num-classes 37 \\
        --batch-size 8 2 2 --rounds 3

Each run is a fresh process in a fresh workdir: ``jaxdet train --pipeline-config CONFIG
--no-eval`` with the TFRecord, label map and class count given here, the batch size given
(else the config's own), no fine-tune checkpoint, ``train.log_every=1`` and
``train.num_steps=1``. The figure is the time from launching the command to the first step's
line in ``metrics.jsonl`` (its timestamp); the log lines come back with the second each
arrived, and the phases they mark (config read, training data ready). The configs take turns
within each round; the median over rounds is the figure.

``--compilation-cache fresh`` (the default) gives every launch an empty compilation cache
(``JAXDET_COMPILATION_CACHE``), as a first run on a machine has; ``warm`` fills one per config
with an untimed launch first, as a resumed or restarted run finds it.

``--vs-src DIR`` times a second jaxdet source tree (``DIR/src``, e.g. a ``git worktree`` of
an earlier commit) by turns with this one: its runs are labelled ``vs`` and use the same
Python, with ``PYTHONPATH`` pointing at that tree.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import common

_PHASES = (("config loaded", re.compile(r"pipeline\.config|config")),
           ("data ready", re.compile(r"^INFO \S+: data\.train: ")),
           ("first step", re.compile(r"step\s+1\b")))


def _phases(lines: list[tuple[float, str]]) -> dict[str, float]:
    """Seconds from launch to the first log line of each phase (where the log shows one)."""
    out: dict[str, float] = {}
    for seconds, line in lines:
        for name, pattern in _PHASES:
            if name not in out and pattern.search(line):
                out[name] = round(seconds, 2)
    return out


def launch_to_first_step(args, config: str, batch_size: int | None, workdir: Path,
                         src: str | None, cache: Path) -> dict:
    """One fresh ``jaxdet train`` run of ``config`` until its first step (see the module
    docstring); ``src``: another source tree's ``src`` folder to run instead of this one."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["JAXDET_COMPILATION_CACHE"] = str(cache)
    if src:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    overrides = [f"data.train.input_path=[{','.join(args.tfrecord)}]",
                 f"data.train.label_map_path={args.label_map}",
                 f"model.num_classes={args.num_classes}",
                 "train.init_checkpoint=null", "train.num_steps=1", "train.log_every=1",
                 "train.checkpoint_every=100000",
                 *([f"train.batch_size={batch_size}"] if batch_size else []),
                 *args.overrides]
    command = [sys.executable, "-m", "jaxdet.cli.main", "train", "--pipeline-config", config,
               "--workdir", str(workdir), "--no-eval", "--no-progress",
               *[x for s in overrides for x in ("--set", s)]]
    launched = time.time()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=env)
    lines = [(time.time() - launched, line.rstrip()) for line in process.stderr]
    returncode = process.wait()
    ended = time.time()
    if returncode != 0:
        tail = "\n".join(line for _, line in lines[-30:])
        raise RuntimeError(f"jaxdet train failed ({returncode}):\n{tail}")
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    first = min((r for r in rows if "train/loss" in r["metrics"]), key=lambda r: r["time"])
    return {"launch_to_first_step_s": round(first["time"] - launched, 2),
            "first_loss": first["metrics"]["train/loss"],
            "process_s": round(ended - launched, 2), "phases_s": _phases(lines),
            "log": [f"{seconds:7.2f} {line}" for seconds, line in lines]}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline-config", required=True, nargs="+")
    parser.add_argument("--tfrecord", required=True, nargs="+")
    parser.add_argument("--label-map", required=True)
    parser.add_argument("--num-classes", type=int, required=True)
    parser.add_argument("--batch-size", type=int, nargs="+", default=None,
                        help="one per config, or one for all (default: each config's own "
                             "train_config.batch_size, often too large for a CPU)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--vs-src", default=None,
                        help="another jaxdet source tree, timed by turns with this one")
    parser.add_argument("--compilation-cache", choices=("fresh", "warm"), default="fresh",
                        help="fresh: every launch starts with an empty compilation cache (a "
                             "first run); warm: the cache holds the config's programs (a "
                             "restarted run)")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args(argv)
    args.tfrecord = [str(Path(p).resolve()) for p in args.tfrecord]
    args.label_map = str(Path(args.label_map).resolve())
    vs_src = str(Path(args.vs_src).resolve() / "src") if args.vs_src else None

    batch_sizes = args.batch_size or [None]
    if len(batch_sizes) == 1:
        batch_sizes = batch_sizes * len(args.pipeline_config)
    elif len(batch_sizes) != len(args.pipeline_config):
        parser.error("--batch-size: one per --pipeline-config, or one for all")
    sides = {"this": None, **({"vs": vs_src} if vs_src else {})}
    with tempfile.TemporaryDirectory() as tmp:
        runs = iter(range(10**6))
        def cache_for(config: str) -> Path:
            """An empty folder per run (``fresh``), or one per config, filled once (``warm``)."""
            if args.compilation_cache == "fresh":
                return Path(tmp) / f"cache_{next(runs)}"
            return Path(tmp) / f"cache_{Path(config).stem}"

        contenders = {
            f"{Path(config).name}|{side}": (
                lambda config=config, batch=batch, src=src: launch_to_first_step(
                    args, str(Path(config).resolve()), batch, Path(tmp) / f"run_{next(runs)}",
                    src, cache_for(config)))
            for config, batch in zip(args.pipeline_config, batch_sizes, strict=True)
            for side, src in sides.items()}
        if args.compilation_cache == "warm":  # one untimed launch each fills the cache
            for config, batch in zip(args.pipeline_config, batch_sizes, strict=True):
                launch_to_first_step(args, str(Path(config).resolve()), batch,
                                     Path(tmp) / f"run_{next(runs)}", None, cache_for(config))
        timed = common.by_turns(contenders, args.rounds, report=common.report_progress)
    result: dict = {"benchmark": "launch_to_first_step", "rounds": args.rounds,
                    "compilation_cache": args.compilation_cache,
                    "batch_size": args.batch_size, "overrides": args.overrides,
                    "vs_src": args.vs_src, "machine": common.machine_info(devices=False),
                    "configs": {}}
    for name, runs_of in timed.items():
        config, side = name.split("|")
        entry = result["configs"].setdefault(config, {})
        entry[side] = {"median_s": common.median(r["launch_to_first_step_s"] for r in runs_of),
                       "runs": runs_of}
    for entry in result["configs"].values():
        if "vs" in entry:
            entry["this_over_vs"] = round(entry["this"]["median_s"] / entry["vs"]["median_s"], 3)
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
