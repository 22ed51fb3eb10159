"""The TF side of the training equivalence ladder (``benchmarks.accuracy.training_ladder``):
what the TF OD API's own training does with one pipeline.config, written to files jaxdet reads.
Run under the TF peer's Python (``../shared/peer/setup_tfod.sh``) from the repository's root:

    TF_USE_LEGACY_KERAS=1 PYTHONPATH=~/tfod-peer/tfod-src ~/tfod-peer/tfod-venv/bin/python \\
        -m benchmarks.peers.training_ladder_tf --pipeline-config pipeline.config --out DIR \\
        --steps 200

Writes into ``DIR``:

- ``batches/batch_NNNNN.npz``: ``--steps`` batches of ``inputs.train_input`` (the config's
  own augmentations and preprocessing, as ``model_main_tf2.py`` reads the records):
  ``images`` (the model's input, float32), ``boxes`` (normalized ymin, xmin, ymax, xmax),
  ``classes`` (0-based), ``weights`` (0 on padding) and ``num_boxes``; with a config that
  loads instance masks, ``masks`` (uint8, at the input size);
- ``step0/``: the freshly built model (the config's own initializers) as a TF2 detection
  checkpoint, ``tf.train.Checkpoint(model=...)`` (batch-norm statistics at their initial
  values);
- ``grads_data/`` and ``grads_reg/``: the gradients of batch 0's detection loss and of the
  regularization loss at step 0, saved in the same checkpoint layout (each trainable variable
  holds its gradient), so that jaxdet's importer maps them onto its parameters;
- ``stepK/``: the model after ``--steps`` updates of ``model_lib_v2.eager_train_step``
  (TF's training step, the config's optimizer and schedule) on those batches;
- ``tf.json``: the losses of step 1 and of every step, the learning rate of every step.

The step is ``model_lib_v2.eager_train_step`` itself inside one ``tf.function``, as
``model_lib_v2.train_loop`` runs it.

``--replay DIR`` (the stability samples) trains again from ``DIR``'s ``step0`` on ``DIR``'s
first ``--steps`` batches instead of drawing new ones, each image moved by ``--perturb EPS``
(uniform in [-EPS, EPS], :func:`perturbation`, the same noise jaxdet's ``training_ladder
trajectory --perturb`` adds), and writes only ``tf.json``: one more sample of TF's training
from one start on one set of batches (TF's CPU reductions are not deterministic either).

``--augment-cases CASES.json --augment-out OUT.json`` (rung 2) instead runs TF's own
``preprocessor.ssd_random_crop`` on each case (an image size and its normalized boxes)
``--draws`` times and writes what came out of each draw: the crop's height and width and the
kept boxes (normalized to the crop).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def _np(x):
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


def dump_batch(path: Path, features: dict, labels: dict) -> None:
    from object_detection.core import standard_fields as fields

    f, lab = fields.InputDataFields, labels
    classes = _np(lab[f.groundtruth_classes])  # one-hot [B, N, C]
    weights = _np(lab[f.groundtruth_weights])
    masks = {}  # instance masks, where the config loads them: uint8 [B, N, H, W]
    if f.groundtruth_instance_masks in lab:
        masks["masks"] = (_np(lab[f.groundtruth_instance_masks]) > 0.5).astype(np.uint8)
    np.savez(path, images=_np(features[f.image]).astype(np.float32),
             boxes=_np(lab[f.groundtruth_boxes]).astype(np.float32),
             classes=np.argmax(classes, axis=-1).astype(np.int32),
             has_class=classes.sum(-1) > 0, weights=weights.astype(np.float32),
             num_boxes=_np(lab[f.num_groundtruth_boxes]).astype(np.int32),
             true_image_shape=_np(features[f.true_image_shape]).astype(np.int32), **masks)


def perturbation(eps: float, seed: int, step: int, shape: tuple[int, ...]) -> np.ndarray:
    """float32 noise uniform in [-eps, eps] for batch ``step`` (0-based) of sample ``seed``;
    zeros for ``eps`` 0. Both ladders' sides draw it here, so both see the same inputs."""
    if not eps:
        return np.zeros(shape, np.float32)
    rng = np.random.default_rng([seed, step])
    return rng.uniform(-eps, eps, size=shape).astype(np.float32)


def load_replayed_batch(path: Path, num_classes: int, eps: float, seed: int,
                        step: int) -> tuple[dict, dict]:
    """A dumped batch as TF's (features, labels), its images moved by :func:`perturbation`."""
    import tensorflow as tf
    from object_detection.core import standard_fields as fields

    z = np.load(path)
    f = fields.InputDataFields
    images = z["images"] + perturbation(eps, seed, step, z["images"].shape)
    one_hot = np.eye(num_classes, dtype=np.float32)[z["classes"]] * z["has_class"][..., None]
    features = {f.image: tf.constant(images),
                f.true_image_shape: tf.constant(z["true_image_shape"])}
    labels = {f.groundtruth_boxes: tf.constant(z["boxes"]),
              f.groundtruth_classes: tf.constant(one_hot),
              f.groundtruth_weights: tf.constant(z["weights"]),
              f.num_groundtruth_boxes: tf.constant(z["num_boxes"])}
    if "masks" in z:
        labels[f.groundtruth_instance_masks] = tf.constant(z["masks"].astype(np.float32))
    return features, labels


def _reset_batch_norm_statistics(model) -> None:
    """The moving statistics back to Keras's initial values (the build call updated them)."""
    for v in model.variables:
        name = v.name.split(":")[0]
        if name.endswith("moving_mean"):
            v.assign(np.zeros(v.shape, v.dtype.as_numpy_dtype))
        elif name.endswith("moving_variance"):
            v.assign(np.ones(v.shape, v.dtype.as_numpy_dtype))


def _save_values(model, values: dict, out: Path) -> None:
    """Save the model's checkpoint with each trainable variable holding ``values[name]``
    (zeros for the others); the model's own values are put back afterwards."""
    import tensorflow as tf

    kept = [(v, v.numpy()) for v in model.variables]
    for v in model.variables:
        v.assign(values.get(v.name, np.zeros(v.shape, v.dtype.as_numpy_dtype)))
    tf.train.Checkpoint(model=model).write(str(out / "ckpt-0"))
    for v, value in kept:
        v.assign(value)


def augment_draws(args) -> None:
    """TF's ssd_random_crop on every case of ``args.augment_cases``, ``args.draws`` times."""
    import tensorflow as tf
    from object_detection.core import preprocessor

    tf.random.set_seed(args.seed)
    cases = json.loads(Path(args.augment_cases).read_text())

    @tf.function(reduce_retracing=True)
    def crop(image, boxes, labels, weights):
        out = preprocessor.ssd_random_crop(image, boxes, labels, weights)
        return tf.shape(out[0])[:2], out[1]

    draws = []
    for case in cases:
        image = tf.zeros((case["height"], case["width"], 1), tf.float32)
        boxes = tf.constant(np.asarray(case["boxes"], np.float32).reshape(-1, 4))
        n = int(boxes.shape[0])
        labels, weights = tf.zeros((n,), tf.int32), tf.ones((n,), tf.float32)
        for _ in range(args.draws):
            size, kept = crop(image, boxes, labels, weights)
            draws.append({"case": case["id"], "size": size.numpy().tolist(),
                          "boxes": kept.numpy().tolist()})
    Path(args.augment_out).write_text(json.dumps(draws))
    print(json.dumps({"draws": len(draws)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--augment-cases")
    parser.add_argument("--augment-out")
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--pipeline-config")
    parser.add_argument("--out")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replay", help="a folder this script wrote: train again from its "
                        "step0 on its batches")
    parser.add_argument("--perturb", type=float, default=0.0,
                        help="with --replay: move every input pixel by up to this much")
    args = parser.parse_args()
    if args.augment_cases:
        augment_draws(args)
        return
    if not (args.pipeline_config and args.out):
        parser.error("--pipeline-config and --out are required")

    import tensorflow as tf
    from object_detection import inputs, model_lib, model_lib_v2
    from object_detection.builders import model_builder
    from object_detection.utils import config_util

    out = Path(args.out)
    (out / "batches").mkdir(parents=True, exist_ok=True)
    tf.keras.utils.set_random_seed(args.seed)
    configs = config_util.get_configs_from_pipeline_file(args.pipeline_config)
    train_config = configs["train_config"]
    model = model_builder.build(configs["model"], is_training=True)
    if args.replay:
        (out / "batches").rmdir()
        replay(args, configs, model, out)
        return
    dataset = inputs.train_input(train_config, configs["train_input_config"], configs["model"],
                                 model=model).repeat()
    batches = []
    for k, (features, labels) in enumerate(dataset.take(args.steps)):
        dump_batch(out / "batches" / f"batch_{k:05d}.npz", features, labels)
        batches.append((features, labels))

    # Build the variables (one forward pass), then undo its batch-norm updates: step 0.
    tf.keras.backend.set_learning_phase(True)
    features, labels = batches[0]
    labels = model_lib.unstack_batch(labels, unpad_groundtruth_tensors=False)
    model_lib_v2._compute_losses_and_predictions_dicts(model, features, labels, True)
    _reset_batch_norm_statistics(model)
    tf.train.Checkpoint(model=model).write(str(out / "step0" / "ckpt-0"))

    with tf.GradientTape(persistent=True) as tape:
        losses, _ = model_lib_v2._compute_losses_and_predictions_dicts(
            model, features, labels, True)
        # every loss of the family but the regularization (SSD: classification and
        # localization; Faster R-CNN: each stage's)
        data_loss = tf.add_n([v for k, v in losses.items()
                              if k not in ("Loss/regularization_loss", "Loss/total_loss")])
        reg_loss = losses.get("Loss/regularization_loss", tf.constant(0.0))
    variables = model.trainable_variables
    for name, target in (("grads_data", data_loss), ("grads_reg", reg_loss)):
        grads = tape.gradient(target, variables)
        _save_values(model, {v.name: g.numpy() for v, g in zip(variables, grads, strict=True)
                             if g is not None}, out / name)
    del tape
    step1 = {k: float(v) for k, v in losses.items()}
    _reset_batch_norm_statistics(model)  # the gradient pass updated them again

    rows, seconds = train(model, train_config, batches)
    tf.train.Checkpoint(model=model).write(str(out / "stepK" / "ckpt-0"))
    (out / "tf.json").write_text(json.dumps({"step1": step1, "steps": rows,
                                             "train_seconds": round(seconds, 1)}))
    print(json.dumps({"out": str(out), "steps": len(rows), "step1": step1}))


def train(model, train_config, batches: list) -> tuple[list[dict], float]:
    """``model_lib_v2.eager_train_step`` in one ``tf.function`` over ``batches`` with the
    config's optimizer and schedule -> (each step's learning rate and losses, seconds)."""
    import tensorflow as tf
    from object_detection import model_lib_v2
    from object_detection.builders import optimizer_builder

    global_step = tf.Variable(0, trainable=False, dtype=tf.int64, name="global_step")
    optimizer, (learning_rate,) = optimizer_builder.build(train_config.optimizer,
                                                         global_step=global_step)
    clip = train_config.gradient_clipping_by_norm or None

    @tf.function
    def train_step(features, labels):
        losses = model_lib_v2.eager_train_step(
            model, features, labels, train_config.unpad_groundtruth_tensors, optimizer,
            training_step=global_step,
            add_regularization_loss=train_config.add_regularization_loss,
            clip_gradients_value=clip, num_replicas=1)
        global_step.assign_add(1)
        return losses

    rows = []
    t0 = time.perf_counter()
    for k, (features, labels) in enumerate(batches):
        rate = float(learning_rate() if callable(learning_rate) else learning_rate)
        losses = train_step(features, labels)
        rows.append({"step": k + 1, "learning_rate": rate,
                     **{key: float(v) for key, v in losses.items()}})
    return rows, time.perf_counter() - t0


def replay(args, configs: dict, model, out: Path) -> None:
    """``--replay``: ``args.replay``'s step 0 and first ``--steps`` batches (moved by
    ``--perturb``, sample ``--seed``) trained again; writes ``out/tf.json``."""
    import tensorflow as tf
    from object_detection import model_lib, model_lib_v2

    source = Path(args.replay)
    files = sorted((source / "batches").glob("batch_*.npz"))[:args.steps]
    meta = configs["model"]
    num_classes = getattr(meta, meta.WhichOneof("model")).num_classes
    batches = [load_replayed_batch(p, num_classes, args.perturb, args.seed, k)
               for k, p in enumerate(files)]
    tf.keras.backend.set_learning_phase(True)
    features, labels = batches[0]
    model_lib_v2._compute_losses_and_predictions_dicts(
        model, features, model_lib.unstack_batch(labels, unpad_groundtruth_tensors=False), True)
    tf.train.Checkpoint(model=model).read(str(source / "step0" / "ckpt-0")).expect_partial()
    _reset_batch_norm_statistics(model)
    rows, seconds = train(model, configs["train_config"], batches)
    (out / "tf.json").write_text(json.dumps({"replay": str(source), "perturb": args.perturb,
                                             "seed": args.seed, "steps": rows,
                                             "train_seconds": round(seconds, 1)}))
    print(json.dumps({"out": str(out), "steps": len(rows), "replay": str(source)}))


if __name__ == "__main__":
    main()
