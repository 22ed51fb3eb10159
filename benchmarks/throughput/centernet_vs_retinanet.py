"""CenterNet next to RetinaNet in one run: train-step and inference throughput of
``centernet_resnet50_v1_fpn_512`` and ``retinanet_resnet50_fpn_640`` on this machine; prints
one JSON object with both and their ratios (CenterNet / RetinaNet).

    python -m benchmarks.throughput.centernet_vs_retinanet --batch-size 2 --steps 3 --iters 3

Both run in fp32 unless ``--precision`` says otherwise (the RetinaNet config asks for bf16,
which CPUs run slowly). The train step and predict are those of ``benchmarks.throughput.train``
and ``benchmarks.throughput.inference`` (synthetic batches, compile timed apart).
"""

from __future__ import annotations

import argparse
import json

from benchmarks import common
from benchmarks.throughput import inference, train

CONFIGS = ("centernet_resnet50_v1_fpn_512", "retinanet_resnet50_fpn_640")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"))
    parser.add_argument("--configs", nargs=2, default=list(CONFIGS))
    args = parser.parse_args(argv)
    rows = {}
    for name in args.configs:
        shared = ["--config", name, "--set", f"precision={args.precision}"]
        trained = train.main(
            [*shared, "--batch-size", str(args.batch_size), "--steps", str(args.steps)])
        infer = inference.main(
            [*shared, "--batch-sizes", str(args.batch_size), "--iters", str(args.iters)])
        rows[name] = {
            "input_size": trained["input_size"],
            "train_images_per_second": trained["images_per_second"],
            "train_step_ms": trained["step_ms"],
            "train_compile_s": trained["compile_s"],
            "model_gflops_per_image_train": trained["model_gflops_per_image"],
            "inference_images_per_second": infer["results"][0]["images_per_second"],
            "inference_latency_ms": infer["results"][0]["latency_ms"],
        }
    a, b = (rows[n] for n in args.configs)
    result = {
        "benchmark": "centernet_vs_retinanet",
        "batch_size": args.batch_size,
        "precision": args.precision,
        "models": rows,
        "train_ratio": round(a["train_images_per_second"] / b["train_images_per_second"], 3),
        "inference_ratio": round(a["inference_images_per_second"]
                                 / b["inference_images_per_second"], 3),
        **common.machine_info(),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
