"""The training equivalence ladder against the TF OD API: where does jaxdet's training of a
pipeline.config depart from TF's? Prints one JSON object per rung.

Rung 1 (``step1`` and ``trajectory``) reads what ``benchmarks.peers.training_ladder_tf`` wrote
under the TF peer (TF's step-0 model, TF's own preprocessed batches, TF's step-1 gradients and
its loss trajectory):

    TF_USE_LEGACY_KERAS=1 PYTHONPATH=~/tfod-peer/tfod-src ~/tfod-peer/tfod-venv/bin/python \\
        -m benchmarks.peers.training_ladder_tf --pipeline-config pipeline.config --out tf_run \\
        --steps 200
    python -m benchmarks.accuracy.training_ladder step1 --pipeline-config pipeline.config \\
        --tf tf_run
    python -m benchmarks.accuracy.training_ladder trajectory --pipeline-config pipeline.config \\
        --tf tf_run

``augment`` runs TF's side itself (``--tf-python`` / ``--tfod-src`` as the other peer
benchmarks).

``step1``: jaxdet builds the config, loads TF's step-0 checkpoint and computes the loss and
its gradients on TF's batch 0. Printed: both sides' loss parts, the relative difference of
each parameter's gradient (TF's gradients are imported through the same name map as weights),
the worst parameters, and the weight-decay gradient against TF's regularization loss's.

``trajectory``: jaxdet's train step (its optimizer, schedule and weight decay from the config)
for as many steps as TF ran, on the same batches from the same start; printed: the loss parts
of both sides over windows of steps, and how far the weights moved apart.

Stability samples (where one run a side says little, near a high rate's warm-up peak): more
runs from the same start on the same batches, each with its inputs moved by noise of
``--perturb`` (uniform, the same draw on both sides for sample ``--seed``); TF's replays its
folder (and its CPU sums differ run to run as well):

    ... training_ladder_tf --pipeline-config pipeline.config --replay tf_run --out tf_s1 \
        --steps 25 --perturb 1e-3 --seed 1
    python -m benchmarks.accuracy.training_ladder trajectory --pipeline-config \
        pipeline.config --tf tf_run --steps 25 --perturb 1e-3 --seed 1 --tf-sample tf_s1/tf.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import common
from benchmarks.peers.training_ladder_tf import perturbation

# TF's loss keys -> (jaxdet's part, a short name for the tables)
LOSS_PARTS = {
    "Loss/classification_loss": ("classification_loss", "cls"),
    "Loss/localization_loss": ("localization_loss", "loc"),
    "Loss/RPNLoss/objectness_loss": ("first_stage_objectness_loss", "rpn_obj"),
    "Loss/RPNLoss/localization_loss": ("first_stage_localization_loss", "rpn_loc"),
    "Loss/BoxClassifierLoss/classification_loss": ("second_stage_classification_loss", "cls"),
    "Loss/BoxClassifierLoss/localization_loss": ("second_stage_localization_loss", "loc"),
    "Loss/BoxClassifierLoss/mask_loss": ("second_stage_mask_loss", "mask"),
    "Loss/object_center": ("heatmap_loss", "center"),
    "Loss/box/scale": ("size_loss", "scale"),
    "Loss/box/offset": ("offset_loss", "offset"),
    "Loss/deep_mask_estimation": ("mask_loss", "mask"),
}


def loss_weight(task, part: str) -> float:
    """The weight of jaxdet's loss ``part`` in TF's reported loss: CenterNet reports its box
    and mask losses weighted (as they enter its total), jaxdet's parts are unweighted; 1 for
    every other family's."""
    weights = {"heatmap_loss": getattr(task, "heatmap_weight", 1.0),
               "size_loss": getattr(task, "size_weight", 1.0),
               "offset_loss": getattr(task, "offset_weight", 1.0)}
    if getattr(task, "mask_head", None) is not None and hasattr(task.mask_head,
                                                                "task_loss_weight"):
        weights["mask_loss"] = task.mask_head.task_loss_weight
    return float(weights.get(part, 1.0))


def load_batch(path: Path, bgr: bool = False) -> dict:
    """One batch dumped by ``peers.training_ladder_tf`` in jaxdet's box batch layout, with
    ``image_info`` (padded height and width, then the content's: Faster R-CNN clips its
    proposals to the content, CenterNet's heatmap losses count inside it, as TF's true image
    shape). TF's input pipeline already gives the boxes normalized to the padded input, as
    jaxdet's loader does. ``bgr``: TF's images are BGR (its model's input; see
    :func:`tf_input_is_bgr`), given to jaxdet as RGB. With a config that loads masks, ``masks``
    uint8 [B, N, H, W] at the input size (jaxdet's ``--set data.mask_stride=1``)."""
    z = np.load(path)
    valid = (z["weights"] > 0) & z["has_class"]
    height, width = z["images"].shape[1:3]
    true = z["true_image_shape"][:, :2].astype(np.float32)  # [B, 2] content h, w
    info = np.concatenate([np.broadcast_to([height, width], true.shape), true], axis=1)
    images = z["images"][..., ::-1] if bgr else z["images"]
    masks = {"masks": jnp.asarray(z["masks"])} if "masks" in z else {}
    return {**masks, "images": jnp.asarray(images), "boxes": jnp.asarray(z["boxes"]),
            "classes": jnp.asarray(np.where(valid, z["classes"], 0).astype(np.int32)),
            "valid": jnp.asarray(valid), "ignore": jnp.zeros(valid.shape, bool),
            "image_info": jnp.asarray(info, jnp.float32)}


def tf_input_is_bgr(task, config) -> bool:
    """Whether TF's model takes BGR images where jaxdet's takes RGB (CenterNet's Keras
    ResNets, caffe preprocessing: jaxdet's TF import reverses the first convolution's input
    channels instead)."""
    from jaxdet import tasks

    return any(transform == "bgr_to_rgb"
               for _, transform in tasks.tf_name_map(task.model, config).values())


def _build(pipeline_config: str, overrides: list[str]):
    from jaxdet import tasks
    from jaxdet.config.tfod import load_pipeline_config

    config = load_pipeline_config(pipeline_config, overrides)
    return config, tasks.build_task(config)


def _tf_variables(config, task_builder, checkpoint: Path) -> tuple[dict, dict]:
    """(params, batch_stats) of a fresh model with ``checkpoint`` (TF layout) loaded."""
    from jaxdet.tasks import weights

    task = task_builder()
    report = weights.load_weights(task.model, config, checkpoint, restore="full", format="tf")
    if report.missing if hasattr(report, "missing") else False:
        raise SystemExit(f"{checkpoint}: not restored: {report.missing[:5]}")
    return task.initial_variables()


def _paths(tree) -> dict[str, np.ndarray]:
    from jaxdet.train.optim import param_path

    return {param_path(p): np.asarray(v) for p, v in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def _by_part(ours: dict, theirs: dict) -> tuple[dict, list]:
    """Per model part (the parameter tree's top level: backbone, neck, head; Faster R-CNN's
    RPN and box classifier): the median relative difference of the
    parameters' gradients, and the worst parameters overall. Parameters whose reference
    gradient is zero in theory (a bias before a batch norm: ~1e-8 of noise) are left out."""
    scale = max(float(np.linalg.norm(v)) for v in theirs.values())
    rel = {k: _relative(ours[k], theirs[k]) for k in ours
           if np.linalg.norm(theirs[k]) > 1e-6 * scale}
    parts = {}
    for part in sorted({k.split("/")[0] for k in rel}):  # backbone, neck, head, rpn, ...
        values = [v for k, v in rel.items() if k.startswith(part + "/")]
        parts[part] = round(statistics.median(values), 4)
    worst = [(k, round(v, 4)) for k, v in sorted(rel.items(), key=lambda kv: -kv[1])[:6]]
    return parts, worst


def step1(args) -> dict:
    """Rung 1: the loss and its gradients at TF's step-0 weights on TF's batch 0. Besides TF
    against jaxdet: jaxdet against itself with the images moved by one part in a million,
    and both sides' float32 gradients against the same computation in float64. A batch-norm
    network at initialization amplifies tiny differences into large gradient differences in
    its early layers, so how far each side is from the float64 result says which side's
    rounding a difference comes from."""
    from jaxdet import tasks
    from jaxdet.train import build as train_build

    config, task = _build(args.pipeline_config, args.overrides)
    tf_dir = Path(args.tf)

    def builder():
        return tasks.build_task(config)

    params, stats = _tf_variables(config, builder, tf_dir / "step0" / "ckpt-0")
    tf_grads, _ = _tf_variables(config, builder, tf_dir / "grads_data" / "ckpt-0")
    tf_reg, _ = _tf_variables(config, builder, tf_dir / "grads_reg" / "ckpt-0")
    batch = load_batch(sorted((tf_dir / "batches").glob("batch_*.npz"))[0],
                       tf_input_is_bgr(task, config))

    def loss_fn(p, images):
        total, (parts, _) = task.loss(p, stats, {**batch, "images": images},
                                      task.step_key(jnp.int32(0)))
        return total, parts

    grad_fn = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))
    (_, parts), grads = grad_fn(params, batch["images"])
    noise = np.random.default_rng(0).standard_normal(batch["images"].shape).astype(np.float32)
    _, moved = grad_fn(params, batch["images"] * (1 + 1e-6 * noise))
    tf_json = json.loads((tf_dir / "tf.json").read_text())["step1"]

    # jaxdet's weight decay enters the update as decay * param on the decayed parameters.
    tx, _ = train_build.build_optimizer(config.train)
    zero = jax.tree.map(jnp.zeros_like, params)
    decay_update, _ = tx.update(zero, tx.init(params), params)  # -lr * (decay term) at step 0
    lr0 = float(train_build.build_schedule(config.train)(0))
    ours, theirs = _paths(grads), _paths(tf_grads)
    decay = {k: -v / lr0 for k, v in _paths(decay_update).items()}
    reg = _paths(tf_reg)
    parts_tf, worst_tf = _by_part(ours, theirs)
    parts_self, _ = _by_part(_paths(moved), ours)
    exact = _float64_gradients(args)  # the same computation in float64, a fresh process
    parts_tf_exact, _ = _by_part(theirs, exact)
    parts_ours_exact, _ = _by_part(ours, exact)
    flat = lambda d: np.concatenate([d[k].ravel() for k in sorted(d)])  # noqa: E731
    reg_rel = {k: _relative(decay[k], reg[k]) for k in reg if np.any(reg[k]) or np.any(decay[k])}
    return {
        "rung": "step1",
        "pipeline_config": Path(args.pipeline_config).name,
        "tf": {**{part: tf_json[k] for k, (part, _) in LOSS_PARTS.items() if k in tf_json},
               "regularization_loss": tf_json.get("Loss/regularization_loss")},
        "jaxdet": {**{part: float(parts[part]) * loss_weight(task, part)
                      for k, (part, _) in LOSS_PARTS.items() if k in tf_json},
                   **({"num_positives": float(parts["num_positives"])}
                      if "num_positives" in parts else {})},
        "gradient_vs_tf_median_by_part": parts_tf,
        "gradient_vs_tf_worst": worst_tf,
        "gradient_vs_itself_images_moved_1e-6_median_by_part": parts_self,
        "tf_float32_vs_float64_median_by_part": parts_tf_exact,
        "jaxdet_float32_vs_float64_median_by_part": parts_ours_exact,
        "gradient_vs_tf_global": round(_relative(flat(ours), flat(theirs)), 4),
        "decay_vs_tf_regularization_gradient_global": _relative(flat(decay), flat(reg)),
        "decay_vs_tf_regularization_gradient_worst": max(reg_rel.values()),
        "params": len(ours),
    }


def _float64_gradients(args) -> dict[str, np.ndarray]:
    """The step-1 gradients computed in float64 throughout the network (a reference for how
    far each side's float32 result is from the exact one), by this module in a fresh process
    (``jax_enable_x64`` must be set before JAX starts)."""
    out = Path(args.tf) / "jaxdet_float64_gradients.npz"
    argv = common.module_command(__spec__.name, "float64-gradients", "--pipeline-config",
                                 args.pipeline_config, "--tf", args.tf,
                                 *[x for item in args.overrides for x in ("--set", item)])
    subprocess.run(argv, check=True, capture_output=True,
                   env=common.with_root_on_path(os.environ))
    return dict(np.load(out))


def float64_gradients(args) -> dict:
    """Child of :func:`_float64_gradients`: the network computes in float64 (its float32
    compute dtype replaced), the loss as usual; writes the gradients by parameter path."""
    jax.config.update("jax_enable_x64", True)
    from jaxdet.core import precision

    precision.COMPUTE_DTYPES["fp32"] = jnp.float64
    from jaxdet import tasks

    config, task = _build(args.pipeline_config, args.overrides)
    tf_dir = Path(args.tf)
    params, stats = _tf_variables(config, lambda: tasks.build_task(config),
                                  tf_dir / "step0" / "ckpt-0")
    params, stats = (jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), t)
                     for t in (params, stats))
    batch = load_batch(sorted((tf_dir / "batches").glob("batch_*.npz"))[0],
                       tf_input_is_bgr(task, config))
    batch["images"] = jnp.asarray(batch["images"], jnp.float64)

    def loss_fn(p):
        return task.loss(p, stats, batch, task.step_key(jnp.int32(0)))[0]

    grads = _paths(jax.jit(jax.grad(loss_fn))(params))
    np.savez(tf_dir / "jaxdet_float64_gradients.npz", **grads)
    return {"rung": "float64-gradients", "params": len(grads)}


def init(args) -> dict:
    """Rung 3: jaxdet's freshly built model (the converted config's initializers) against
    TF's freshly built one (its step-0 checkpoint): per parameter, the ratio of the standard
    deviations (and the mean of each side), listed where they differ by more than sampling
    noise allows (5 standard errors of a standard deviation, ``sqrt(1 / (2 n))``)."""
    from jaxdet import tasks

    config, task = _build(args.pipeline_config, args.overrides)
    ours, _ = task.initial_variables()
    theirs, _ = _tf_variables(config, lambda: tasks.build_task(config),
                              Path(args.tf) / "step0" / "ckpt-0")
    ours, theirs = _paths(ours), _paths(theirs)
    rows, off = [], []
    for k in ours:
        a, b = ours[k].astype(np.float64), theirs[k].astype(np.float64)
        sa, sb = float(a.std()), float(b.std())
        row = {"param": k, "size": int(a.size), "jaxdet_std": round(sa, 5),
               "tf_std": round(sb, 5), "jaxdet_mean": round(float(a.mean()), 5),
               "tf_mean": round(float(b.mean()), 5)}
        rows.append(row)
        tolerance = 5 * np.sqrt(1 / (2 * a.size)) if a.size > 1 else 0
        if (sb == 0) != (sa == 0) or (sb and abs(sa / sb - 1) > max(tolerance, 1e-6)):
            off.append({**row, "std_ratio": round(sa / sb, 3) if sb else None})
    return {"rung": "init", "pipeline_config": Path(args.pipeline_config).name,
            "params": len(rows), "differ": len(off), "differing": off[:args.show],
            "std_ratio_median": round(float(np.median(
                [r["jaxdet_std"] / r["tf_std"] for r in rows if r["tf_std"]])), 3)}


def crop_statistics(draws: list[dict], cases: dict) -> dict:
    """Distributions of what a random crop produced: the crop's share of the image's area,
    boxes kept per image, the kept boxes' sides in the crop (sqrt of their normalized area),
    the share of draws that kept the whole image and the share that kept no box."""
    area, kept, sides, whole, none = [], [], [], 0, 0
    for d in draws:
        case = cases[d["case"]]
        h, w = d["size"]
        area.append(h * w / (case["height"] * case["width"]))
        whole += (h, w) == (case["height"], case["width"])
        boxes = np.asarray(d["boxes"], np.float64).reshape(-1, 4)
        kept.append(len(boxes))
        none += len(boxes) == 0
        sides += np.sqrt(np.clip((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]),
                                 0, None)).tolist()

    def quantiles(values):
        return [round(float(q), 3) for q in np.quantile(values, [0.1, 0.25, 0.5, 0.75, 0.9])]

    return {"draws": len(draws), "crop_area_quantiles": quantiles(area),
            "crop_area_mean": round(float(np.mean(area)), 4),
            "whole_image_share": round(whole / len(draws), 4),
            "no_box_share": round(none / len(draws), 4),
            "boxes_kept_mean": round(float(np.mean(kept)), 3),
            "box_side_quantiles": quantiles(sides)}


def augment(args) -> dict:
    """Rung 2: jaxdet's ssd_random_crop against TF's own on the same cases (the first
    ``--cases`` images of a COCO annotation file: their sizes and boxes), ``--draws`` draws
    each: the distributions of crop area, boxes kept and box sizes, side by side."""
    from jaxdet.data.augment import SSDRandomCrop

    coco = json.loads(Path(args.coco).read_text())
    by_image: dict[int, list] = {}
    for a in coco["annotations"]:
        by_image.setdefault(a["image_id"], []).append(a["bbox"])
    cases = []
    for image in coco["images"][:args.cases]:
        h, w = image["height"], image["width"]
        boxes = [[y / h, x / w, (y + bh) / h, (x + bw) / w]
                 for x, y, bw, bh in by_image.get(image["id"], [])]
        cases.append({"id": image["id"], "height": h, "width": w, "boxes": boxes})
    tf_dir = Path(args.tf)
    tf_dir.mkdir(parents=True, exist_ok=True)
    (tf_dir / "augment_cases.json").write_text(json.dumps(cases))
    tf_draws = tf_dir / "augment_draws.json"
    if not tf_draws.exists():
        python, env = common.tf_peer(args)
        common.run_json(common.peer_command(
            python, "training_ladder_tf", "--augment-cases", str(tf_dir / "augment_cases.json"),
            "--augment-out", str(tf_draws), "--draws", str(args.draws)), env,
            what="TF's ssd_random_crop draws")
    op = SSDRandomCrop()
    rng = np.random.default_rng(args.seed)
    ours = []
    for case in cases:
        sample = {"image": np.zeros((case["height"], case["width"], 1), np.uint8),
                  "boxes": np.asarray(case["boxes"], np.float32).reshape(-1, 4),
                  "classes": np.zeros((len(case["boxes"]),), np.int32),
                  "is_crowd": np.zeros((len(case["boxes"]),), bool)}
        for _ in range(args.draws):
            out = op(sample, rng)
            ours.append({"case": case["id"], "size": list(out["image"].shape[:2]),
                         "boxes": np.asarray(out["boxes"]).tolist()})
    by_id = {c["id"]: c for c in cases}
    return {"rung": "augment", "op": "ssd_random_crop", "cases": len(cases),
            "tf": crop_statistics(json.loads(tf_draws.read_text()), by_id),
            "jaxdet": crop_statistics(ours, by_id)}


def box_statistics(per_image: list[np.ndarray]) -> dict:
    """What a training input pipeline hands the model, per image: the valid boxes (normalized
    yxyx) -> the distributions of their count, their side (sqrt of the normalized area) and
    their aspect (width / height in the model's input)."""
    counts = [len(b) for b in per_image]
    boxes = np.concatenate([b for b in per_image if len(b)]).astype(np.float64)
    h, w = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    q = (0.1, 0.25, 0.5, 0.75, 0.9)
    return {"images": len(per_image), "boxes_per_image_mean": round(float(np.mean(counts)), 3),
            "images_without_boxes": round(float(np.mean(np.asarray(counts) == 0)), 4),
            "box_side_quantiles": np.quantile(np.sqrt(np.clip(h * w, 0, None)), q).round(3)
            .tolist(),
            "box_aspect_quantiles": np.quantile(w / np.maximum(h, 1e-9), q).round(3).tolist(),
            "box_center_x_mean": round(float(np.mean((boxes[:, 1] + boxes[:, 3]) / 2)), 4)}


def inputs(args) -> dict:
    """Rung 2, whole pipeline: the boxes TF's own ``inputs.train_input`` handed the model
    (the batches ``peers.training_ladder_tf`` dumped: the config's augmentations, resizer,
    padding) against those jaxdet's training loader hands it, on the same records and config:
    boxes per image, their sizes and aspects, where their centres fall."""
    from jaxdet import tasks

    config, _ = _build(args.pipeline_config, args.overrides)
    files = sorted(Path(args.tf, "batches").glob("batch_*.npz"))
    theirs = []
    for path in files:
        z = np.load(path)
        valid = (z["weights"] > 0) & z["has_class"]
        theirs += [z["boxes"][i][valid[i]] for i in range(len(valid))]
    family = tasks.family(config)
    source = family.data().build_source(config, Path(args.tf), "train")
    loader = family.data().build_train_loader(config, source, seed=args.seed)
    ours = []
    for batch in loader:
        valid = np.asarray(batch["valid"])
        ours += [np.asarray(batch["boxes"])[i][valid[i]] for i in range(len(valid))]
        if len(ours) >= len(theirs):
            break
    return {"rung": "inputs", "pipeline_config": Path(args.pipeline_config).name,
            "tf": box_statistics(theirs), "jaxdet": box_statistics(ours)}


def trajectory(args) -> dict:
    from jaxdet import tasks
    from jaxdet.train import build as train_build
    from jaxdet.train.step import init_train_state

    config, task = _build(args.pipeline_config, args.overrides)
    tf_dir = Path(args.tf)
    from jaxdet.tasks import weights

    weights.load_weights(task.model, config, tf_dir / "step0" / "ckpt-0", restore="full",
                         format="tf")
    tx, schedule = train_build.build_optimizer(config.train)
    state = init_train_state(task, tx, ema=False)
    step = train_build.build_train_step(config, task, tx, schedule)
    bgr = tf_input_is_bgr(task, config)
    every_file = sorted((tf_dir / "batches").glob("batch_*.npz"))
    files = every_file[:args.steps or None]
    rows = []
    for k, path in enumerate(files):
        batch = load_batch(path, bgr)
        if args.perturb:  # the same noise as the TF side's --replay --perturb
            noise = perturbation(args.perturb, args.seed, k, batch["images"].shape)
            batch["images"] = batch["images"] + jnp.asarray(noise)
        state, metrics = step(state, batch)
        rows.append({"step": k + 1, **{m: float(v) * loss_weight(task, m)
                                       for m, v in metrics.items()}})
    tf_rows = json.loads((Path(args.tf_sample) if args.tf_sample else tf_dir / "tf.json")
                         .read_text())["steps"][:len(rows)]
    window = args.window
    table = []
    for start in range(0, len(rows), window):
        ours, theirs = rows[start:start + window], tf_rows[start:start + window]
        row = {"steps": f"{start + 1}-{start + len(ours)}"}
        for tf_key, (part, short) in LOSS_PARTS.items():
            if tf_key in theirs[0]:
                row[f"tf_{short}"] = round(statistics.fmean(r[tf_key] for r in theirs), 4)
                row[f"jaxdet_{short}"] = round(statistics.fmean(r[part] for r in ours), 4)
        row["tf_lr"] = round(theirs[0]["learning_rate"], 5)
        row["jaxdet_lr"] = round(ours[0]["learning_rate"], 5)
        table.append(row)
    first = [{"step": r["step"], **{f"{side}_{short}": round(row[key], 5)
                                    for tf_key, (part, short) in LOSS_PARTS.items()
                                    if tf_key in t
                                    for side, row, key in (("tf", t, tf_key), ("jaxdet", r, part))}}
             for r, t in zip(rows[:5], tf_rows[:5], strict=False)]
    final = {}
    if (tf_dir / "stepK" / "ckpt-0.index").exists() and len(rows) == len(every_file):
        tf_params, tf_stats = _tf_variables(config, lambda: tasks.build_task(config),
                                            tf_dir / "stepK" / "ckpt-0")
        a, b = _paths(state["params"]), _paths(tf_params)
        start_params = _paths(_tf_variables(config, lambda: tasks.build_task(config),
                                            tf_dir / "step0" / "ckpt-0")[0])
        moved = {k: _relative(a[k] - start_params[k], b[k] - start_params[k]) for k in a
                 if np.any(b[k] - start_params[k])}
        final = {"update_relative_difference_median": statistics.median(moved.values()),
                 "update_relative_difference_worst": sorted(moved.items(),
                                                            key=lambda kv: -kv[1])[:5]}
    return {"rung": "trajectory", "pipeline_config": Path(args.pipeline_config).name,
            "steps": len(rows), "first_steps": first, "windows": table, **final}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rung", choices=["step1", "trajectory", "init", "augment", "inputs",
                                         "float64-gradients"])
    parser.add_argument("--pipeline-config")
    parser.add_argument("--tf", required=True,
                        help="the folder benchmarks.peers.training_ladder_tf wrote")
    parser.add_argument("--coco", help="augment: a COCO annotation file (sizes and boxes)")
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--show", type=int, default=20, help="rows of differences to print")
    parser.add_argument("--steps", type=int, default=0,
                        help="trajectory: the first N batches only (default: all)")
    parser.add_argument("--perturb", type=float, default=0.0,
                        help="trajectory: move every input pixel by up to this much (the "
                        "noise of sample --seed, as the TF side's --replay --perturb)")
    parser.add_argument("--tf-sample", help="trajectory: compare with this tf.json (a TF "
                        "--replay sample) instead of the folder's own")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    common.add_tf_peer_arguments(parser)
    args = parser.parse_args(argv)
    if args.rung == "augment" and not args.coco:
        parser.error("augment needs --coco")
    if args.rung != "augment" and not args.pipeline_config:
        parser.error(f"{args.rung} needs --pipeline-config")
    rungs = {"step1": step1, "trajectory": trajectory, "init": init, "augment": augment,
             "inputs": inputs, "float64-gradients": float64_gradients}
    result = {**rungs[args.rung](args), "machine": common.machine_info()}
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
