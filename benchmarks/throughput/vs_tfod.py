"""jaxdet against the TF Object Detection API on the same machine: train step and batch-1 /
batch-8 inference per config, one after the other, and their ratio; prints one JSON object
per config, then a summary table.

    python -m benchmarks.throughput.vs_tfod        # the three configs of issue 22
    python -m benchmarks.throughput.vs_tfod --pairs \
        ssd_mobilenet_v2_320x320_coco17_tpu-8:ssd_mobilenet_v2_320:8

Each pair is ``TF config name : jaxdet config : train batch``. The TF side runs
``benchmarks.peers.tfod_timing`` under the TF peer's Python (``--tf-python``, default
``$TFPY`` or ``~/tfod-peer/tfod-venv/bin/python``, with the TF OD API sources on
``PYTHONPATH``: ``--tfod-src``, default ``~/tfod-peer/tfod-src``; build both with
``../shared/peer/setup_tfod.sh``) on the zoo's own ``pipeline.config`` (``--tf-configs``,
default ``../shared/data/tfod/configs``). The jaxdet side runs
``benchmarks.throughput.train --max-boxes 16 --set precision=fp32`` and
``benchmarks.throughput.inference --set precision=fp32``. Both fp32, synthetic batches with
1-16 random boxes per image, random weights. A ratio > 1 means jaxdet is faster.

Each side runs with its own default allocator: the jaxdet scripts start themselves with
``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` and the block cache preloaded, as the ``jaxdet``
command does (``backends.process``), TF without (measured: TF gains nothing from the
tunable, 0.294 s vs 0.339 s for the MobileNet SSD step). ``--tf-huge-pages`` and
``--tf-block-cache`` give TF either too (where the machine has them, as jaxdet gets them);
``--no-huge-pages`` and ``--no-block-cache`` take them from jaxdet.

    python -m benchmarks.throughput.vs_tfod --train-rounds 3   # train steps, by turns

``--train-rounds R`` times only the train step, TF then jaxdet, R times per config, and prints
each round's ratio and their median: a 2-core VM's speed drifts by 10-30% over minutes, and
alternating spreads the drift over both sides.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from benchmarks import common
from jaxdet.backends.process import fast_allocator_environment

ISSUE_22 = ("ssd_mobilenet_v2_320x320_coco17_tpu-8:ssd_mobilenet_v2_320:8",
            "ssd_efficientdet_d0_512x512_coco17_tpu-8:efficientdet_d0:2",
            "ssd_resnet50_v1_fpn_640x640_coco17_tpu-8:retinanet_resnet50_fpn_640:2")


def _allocator_env(args, side: str) -> dict:
    """This process's environment for one ``side`` (tf / jaxdet), huge pages and the block
    cache as asked."""
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if side == "tf":  # the settings jaxdet would get, given to TF's process
        asked = {**env, "JAXDET_HUGE_PAGES": "1" if args.tf_huge_pages else "0",
                 "JAXDET_BLOCK_CACHE": "1" if args.tf_block_cache else "0"}
        given = fast_allocator_environment(asked) or asked
        return {k: v for k, v in given.items()
                if k not in ("JAXDET_HUGE_PAGES", "JAXDET_BLOCK_CACHE")}
    # the jaxdet scripts restart themselves with what these allow
    return {**env, "JAXDET_HUGE_PAGES": "0" if args.no_huge_pages else "1",
            "JAXDET_BLOCK_CACHE": "0" if args.no_block_cache else "1"}


def tf_side(args, tf_name: str, batch: int, infer: bool = True) -> dict:
    config = Path(os.path.expanduser(args.tf_configs)) / f"{tf_name}.config"
    if not config.is_file():
        raise FileNotFoundError(f"{config} does not exist (--tf-configs)")
    python, env = common.tf_peer(args, _allocator_env(args, "tf"))
    return common.run_json(common.peer_command(
        python, "tfod_timing", "--pipeline-config", str(config), "--train-batch-size",
        str(batch), "--steps", str(args.steps), "--infer-batch-sizes",
        *(map(str, args.infer_batch_sizes) if infer else ()), "--calls", str(args.calls),
        "--warmup", str(args.warmup)), env, what=f"the TF side of {tf_name}")


def jaxdet_train(args, name: str, batch: int) -> dict:
    return common.run_json(common.module_command(
        "benchmarks.throughput.train", "--config", name, "--batch-size", str(batch),
        "--steps", str(args.steps), "--max-boxes", "16", "--warmup", str(args.warmup),
        "--set", "precision=fp32"), common.with_root_on_path(_allocator_env(args, "jaxdet")))


def jaxdet_side(args, name: str, batch: int) -> dict:
    train = jaxdet_train(args, name, batch)
    infer = common.run_json(common.module_command(
        "benchmarks.throughput.inference", "--config", name, "--batch-sizes",
        *map(str, args.infer_batch_sizes), "--iters", str(args.calls), "--warmup",
        str(args.warmup), "--set", "precision=fp32"),
        common.with_root_on_path(_allocator_env(args, "jaxdet")))
    return {"train": train, "inference": infer}


def compare(tf: dict, ours: dict) -> dict:
    """Seconds per train step and per inference call of both, and TF / jaxdet ratios."""
    row = {"train_batch_size": tf["train"]["batch_size"],
           "train_step_s": {"tfod": round(tf["train"]["step_seconds"], 3),
                            "jaxdet": round(ours["train"]["step_ms"] / 1000, 3)},
           "train_compile_s": {"tfod": round(tf["train"]["first_call_seconds"], 1),
                               "jaxdet": ours["train"]["compile_s"]}}
    row["train_ratio"] = round(row["train_step_s"]["tfod"] / row["train_step_s"]["jaxdet"], 2)
    ours_infer = {r["batch_size"]: r for r in ours["inference"]["results"]}
    for r in tf["inference"]:
        b = r["batch_size"]
        mine = ours_infer[b]["latency_ms"] / 1000
        row[f"inference_b{b}_s"] = {"tfod": round(r["seconds"], 4), "jaxdet": round(mine, 4)}
        row[f"inference_b{b}_ratio"] = round(r["seconds"] / mine, 2)
    return row


def train_rounds(args, tf_name: str, name: str, batch: int) -> dict:
    """``--train-rounds`` R: the train step only, TF then jaxdet, R times over (each a fresh
    process, compile included); each round's ratio and their median. On a machine whose speed
    drifts over minutes, the rounds spread the drift over both sides."""
    seconds = common.by_turns(
        {"tfod": lambda: tf_side(args, tf_name, batch, infer=False)["train"]["step_seconds"],
         "jaxdet": lambda: jaxdet_train(args, name, batch)["step_ms"] / 1000},
        args.train_rounds, report=lambda side, s: common.report_progress(
            f"{name}: {side} step seconds", round(s, 3)))
    rounds = [{"tfod": round(tf, 3), "jaxdet": round(ours, 3), "ratio": round(tf / ours, 2)}
              for tf, ours in zip(seconds["tfod"], seconds["jaxdet"], strict=True)]
    return {"tfod_config": tf_name, "jaxdet_config": name, "train_batch_size": batch,
            "train_rounds": rounds,
            "train_ratio": round(common.median(r["ratio"] for r in rounds), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs="+", default=list(ISSUE_22))
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=5,
                        help="untimed steps / calls after the first, on both sides")
    parser.add_argument("--infer-batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--tf-huge-pages", action="store_true",
                        help="run TF with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 too")
    parser.add_argument("--no-huge-pages", action="store_true",
                        help="run jaxdet without it (JAXDET_HUGE_PAGES=0)")
    parser.add_argument("--tf-block-cache", action="store_true",
                        help="run TF with jaxdet's block cache preloaded too")
    parser.add_argument("--no-block-cache", action="store_true",
                        help="run jaxdet without it (JAXDET_BLOCK_CACHE=0)")
    common.add_tf_peer_arguments(parser)
    parser.add_argument("--tf-configs", default=str(common.SHARED_DATA / "tfod" / "configs"))
    parser.add_argument("--train-rounds", type=int, default=0,
                        help="time only the train step, TF and jaxdet alternately, this many "
                             "times per config, and report the median ratio")
    args = parser.parse_args()
    if args.train_rounds:
        for pair in args.pairs:
            tf_name, name, batch = pair.split(":")
            print(json.dumps(train_rounds(args, tf_name, name, int(batch))), flush=True)
        return
    table = []
    for pair in args.pairs:
        tf_name, name, batch = pair.split(":")
        tf = tf_side(args, tf_name, int(batch))
        ours = jaxdet_side(args, name, int(batch))
        row = {"tfod_config": tf_name, "jaxdet_config": name, **compare(tf, ours),
               "tensorflow": tf["tensorflow"], "jax": ours["train"]["jax"],
               "cpu_count": ours["train"]["cpu_count"], "huge_pages": {"tfod": args.tf_huge_pages,
                                              "jaxdet": not args.no_huge_pages},
               "block_cache": {"tfod": args.tf_block_cache,
                               "jaxdet": not args.no_block_cache}}
        print(json.dumps(row), flush=True)
        table.append(row)
    print("| jaxdet config | train (batch) | inference b1 | inference b8 |")
    for r in table:
        print(f"| {r['jaxdet_config']} | {r['train_ratio']}x ({r['train_batch_size']}) | "
              f"{r.get('inference_b1_ratio', '-')}x | {r.get('inference_b8_ratio', '-')}x |")


if __name__ == "__main__":
    main()
