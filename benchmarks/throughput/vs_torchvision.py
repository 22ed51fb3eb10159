"""jaxdet vs torchvision (RetinaNet or Faster R-CNN, ResNet50-FPN) in one process: train step
and inference.

    make peer-venv     # once: .venv-peer = jaxdet + torch + torchvision (kept out of make test)
    .venv-peer/bin/python -m benchmarks.throughput.vs_torchvision --train-batch-size 2 \
        --infer-batch-sizes 1 8 --calls 4
    .venv-peer/bin/python -m benchmarks.throughput.vs_torchvision \
        --config faster_rcnn_resnet50_v1_fpn_640

Both detectors get the same random 640x640 images, the same random boxes and the same batch
size, and run with the same thread count (``torch.set_num_threads(--threads)``; XLA:CPU uses
one thread per core, so the default is ``os.cpu_count()``). Every jaxdet measurement runs
before torch runs anything: measured here, a jaxdet train step timed between torchvision
steps ran 15% slower than on its own (8.2 s -> 9.6 s at batch 2 on the 2-core CPU), while
torchvision was unaffected by running after jaxdet, so alternating would bias the ratio
against jaxdet. Each figure is the median of ``--calls`` timed calls after warm-up.

- **ours**: ``--config`` (default ``retinanet_resnet50_fpn_640``, the TF OD API RetinaNet:
  6 anchors per location, 90 classes), jitted train step (loss, gradients, optimizer) and
  jitted ``predict`` (forward, decode, batched NMS). Compile time is reported apart.
- **torchvision**: ``--peer`` (default: ``fasterrcnn_resnet50_fpn`` for a ``faster_rcnn``
  config, else ``retinanet_resnet50_fpn``) built with ``weights=None, weights_backbone=None,
  num_classes=91, min_size=640, max_size=640`` (RetinaNet: 9 anchors per location; Faster
  R-CNN: its defaults, 2000 / 1000 RPN proposals in train / eval, 512 sampled RoIs, RoIAlign
  7x7 from P2-P5, 100 detections), ``model(images, targets)`` + backward + SGD-momentum step
  in train mode, ``model(images)`` under ``no_grad`` in eval mode (its transform, head,
  decode and NMS included). Two warm-up calls are not timed.
- ``--match-torchvision-head`` sets ours to 9 anchors per location and 91 classes as well,
  so both do the same convolutions. ``--config retinanet_resnet50_fpn_torchvision --set
  'data.resizer={name: fixed_shape, height: 640, width: 640}'`` runs torchvision's network
  itself in jaxdet (its FPN without norms, its head, anchors and 91 classes).
- On a GPU (jax backend ``gpu`` and torch CUDA available) ours runs in bf16 unless
  ``--set precision=...`` says otherwise, and torchvision runs under bf16 autocast with
  ``channels_last``.

Prints one JSON object: per framework and mode the median seconds per call and images per
second, and ``ratio`` = ours / torchvision images per second.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import numpy as np

from benchmarks import common
from benchmarks.throughput.inference import OurPredictor
from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.data import build as data_build
from jaxdet.train import build as train_build
from jaxdet.train.step import init_train_state

MATCH_TORCHVISION_HEAD = ["model.num_classes=91", "model.anchors.scales_per_octave=3"]
PEERS = ("retinanet_resnet50_fpn", "fasterrcnn_resnet50_fpn")


class OurTrainer:
    """One jitted train step of a config on fixed synthetic batches (as
    ``benchmarks.throughput.train``)."""

    def __init__(self, config, batches: list[dict]):
        task = tasks.build_task(config)
        tx, schedule = train_build.build_optimizer(config.train)
        self.step = train_build.build_train_step(config, task, tx, schedule)
        self.state = init_train_state(task, tx, ema=config.train.ema_decay is not None,
                                      loss_scale=train_build.build_loss_scale(config))
        self.batches = [jax.device_put(b) for b in batches]
        self.calls = 0
        t0 = time.perf_counter()
        self()
        self.compile_s = time.perf_counter() - t0

    def __call__(self) -> None:
        batch = self.batches[self.calls % len(self.batches)]
        self.state, metrics = self.step(self.state, batch)
        jax.block_until_ready(metrics["loss"])
        self.calls += 1


class Torchvision:
    """A torchvision detector (``peer``: a ``torchvision.models.detection`` builder) on the
    same images/boxes; ``train()``/``infer()`` block."""

    def __init__(self, batches: list[dict], *, threads: int, gpu: bool,
                 peer: str = "retinanet_resnet50_fpn"):
        import torch
        from torchvision.models import detection

        self.torch = torch
        torch.set_num_threads(threads)
        torch.manual_seed(0)
        self.device = torch.device("cuda" if gpu else "cpu")
        self.gpu = gpu
        height, width = batches[0]["images"].shape[1:3]
        model = getattr(detection, peer)(
            weights=None, weights_backbone=None, num_classes=91,
            min_size=min(height, width), max_size=max(height, width),
        ).to(self.device)
        if gpu:
            model = model.to(memory_format=torch.channels_last)
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
        self.inputs = [self._convert(b, height, width) for b in batches]
        self.calls = 0

    def _convert(self, batch: dict, height: int, width: int):
        torch = self.torch
        images, targets = [], []
        scale = np.asarray([width, height, width, height], np.float32)
        for b in range(batch["images"].shape[0]):
            # [H, W, 3] normal noise -> [3, H, W] in [0, 1], as torchvision expects.
            image = (batch["images"][b] * 0.25 + 0.5).clip(0, 1).transpose(2, 0, 1)
            images.append(torch.from_numpy(np.ascontiguousarray(image)).to(self.device))
            valid = batch["valid"][b]
            yxyx = batch["boxes"][b][valid].clip(0, 1)
            xyxy = yxyx[:, [1, 0, 3, 2]] * scale
            targets.append({
                "boxes": torch.from_numpy(xyxy).to(self.device),
                # torchvision's 91 outputs: 0 is background, objects are 1..90.
                "labels": torch.from_numpy(batch["classes"][b][valid].astype(np.int64) % 90 + 1)
                .to(self.device),
            })
        return images, targets

    def _autocast(self):
        if self.gpu:
            return self.torch.autocast("cuda", dtype=self.torch.bfloat16)
        return self.torch.autocast("cpu", enabled=False)

    def _sync(self) -> None:
        if self.gpu:
            self.torch.cuda.synchronize()

    def train(self) -> None:
        images, targets = self.inputs[self.calls % len(self.inputs)]
        self.calls += 1
        self.model.train()
        with self._autocast():
            losses = self.model(images, targets)
            loss = sum(losses.values())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self._sync()

    def infer(self, batch_size: int) -> None:
        images, _ = self.inputs[0]
        images = (images * -(-batch_size // len(images)))[:batch_size]
        self.model.eval()
        with self.torch.no_grad(), self._autocast():
            self.model(images)
        self._sync()

    def conv_gflops_per_image(self) -> float | None:
        """Multiply-add FLOPs (x2) of one eval forward at batch 1, by torch's FLOP counter."""
        try:
            from torch.utils.flop_counter import FlopCounterMode
        except ImportError:
            return None
        counter = FlopCounterMode(display=False)
        self.model.eval()
        with self.torch.no_grad(), counter:
            self.model(self.inputs[0][0][:1])
        return counter.get_total_flops() / 1e9


def _figures(times: list[float], batch_size: int) -> dict:
    median = common.median(times)
    return {"s_per_call": round(median, 4), "images_per_second": round(batch_size / median, 3),
            "calls": len(times)}


def _row(batch_size: int, compile_s: float, gflops: float | None, ours_t: list[float],
         theirs_t: list[float]) -> dict:
    row = {"batch_size": batch_size, "ours_compile_and_first_call_s": compile_s}
    if gflops is not None:
        row["ours_gflops_per_image"] = gflops
    row["ours"] = _figures(ours_t, batch_size)
    row["torchvision"] = _figures(theirs_t, batch_size)
    row["ratio"] = round(row["ours"]["images_per_second"]
                         / row["torchvision"]["images_per_second"], 3)
    return row


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="retinanet_resnet50_fpn_640")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--match-torchvision-head", action="store_true")
    parser.add_argument("--train-batch-size", type=int, default=2, help="0 skips training")
    parser.add_argument("--infer-batch-sizes", type=int, nargs="*", default=[1, 8])
    parser.add_argument("--calls", type=int, default=4, help="timed calls per measurement")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--peer", choices=PEERS, default=None,
                        help="torchvision detector (default: by the config's model.type)")
    args = parser.parse_args(argv)

    import torch
    import torchvision

    gpu = jax.default_backend() == "gpu" and torch.cuda.is_available()
    overrides = (["precision=bf16"] if gpu else ["precision=fp32"]) + list(args.overrides)
    if args.match_torchvision_head:
        overrides += MATCH_TORCHVISION_HEAD
    config = load_config(args.config, overrides)
    peer = args.peer or ("fasterrcnn_resnet50_fpn" if config.model.type == "faster_rcnn"
                         else "retinanet_resnet50_fpn")
    size = data_build.input_size(config.data)
    rng = np.random.default_rng(0)
    n = max([args.train_batch_size, *args.infer_batch_sizes, 1])
    max_boxes = config.data.max_number_of_boxes
    layout = tasks.build_task(config).batch_layout()
    batches = [common.synthetic_batch(rng, n, size, max_boxes, config.model.num_classes, layout)
               for _ in range(2)]
    result = {
        "benchmark": "vs_torchvision",
        "config": args.config,
        "peer": peer,
        "overrides": overrides,
        "input_size": list(size),
        "threads": args.threads,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "torchvision_precision": "bf16 autocast, channels_last" if gpu else "fp32",
        **common.machine_info(),
    }
    # All of ours first (see the module docstring), then torchvision on the same inputs.
    b = args.train_batch_size
    train_batches = [{k: v[:b] for k, v in batch.items()} for batch in batches]
    ours_rows = {}
    if b:
        trainer = OurTrainer(config.model_copy(update={"train": config.train.model_copy(
            update={"batch_size": b})}), train_batches)
        ours_rows["train"] = (round(trainer.compile_s, 2), None,
                              common.timed_calls(trainer, args.calls, warmup=1))
        del trainer
    for ib in args.infer_batch_sizes:
        predictor = OurPredictor(config, ib)
        ours_rows[ib] = (round(predictor.compile_s, 2), round(predictor.flops / ib / 1e9, 2),
                         common.timed_calls(predictor, args.calls, warmup=1))
        del predictor

    theirs = Torchvision(batches, threads=args.threads, gpu=gpu, peer=peer)
    result["torchvision_gflops_per_image"] = theirs.conv_gflops_per_image()
    if b:
        theirs_train = Torchvision(train_batches, threads=args.threads, gpu=gpu, peer=peer)
        compile_s, _, ours_t = ours_rows["train"]
        theirs_t = common.timed_calls(theirs_train.train, args.calls, warmup=2)
        result["train"] = _row(b, compile_s, None, ours_t, theirs_t)
        del theirs_train
    result["inference"] = []
    for ib in args.infer_batch_sizes:
        compile_s, gflops, ours_t = ours_rows[ib]
        theirs_t = common.timed_calls(lambda ib=ib: theirs.infer(ib), args.calls, warmup=2)
        result["inference"].append(_row(ib, compile_s, gflops, ours_t, theirs_t))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
