"""A detector in memory: loaded once, then run on numpy arrays, PIL images and image files.

    detector = load_detector(model_source("runs/demo"))
    found = detector.predict(image)             # one image -> Detections
    many = detector.predict([a, b, "c.jpg"])    # a list -> a list of Detections

Images take the path ``jaxdet predict`` takes (the same code): the config's eval transforms on
the host (resize to the model's input size, padding), then normalization and ``task.predict``
under ``jax.jit``; boxes come back in the pixels of each image as given. Files decode as the
command decodes them (TF's JPEG decode for a TF checkpoint, ``data.build.decode_mode``). Each
batch size compiles once and is reused; the last batch of a list is padded to it.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from PIL import Image

from jaxdet import files, tasks
from jaxdet.config import schema as S
from jaxdet.data import build as data_build
from jaxdet.data.decode import load_image
from jaxdet.data.pixels import display_pixels, rgb_pixels
from jaxdet.data.sample_pipeline import eval_sample
from jaxdet.eval.runner import make_predict_fn, predict_callable
from jaxdet.jobs import runs
from jaxdet.jobs.export_job import export_loaded
from jaxdet.jobs.model_source import UNTRAINED, ModelSource, describe_weights
from jaxdet.parallel import build as parallel_build
from jaxdet.parallel.mesh import check_batch_layout
from jaxdet.parallel.sharding import mesh_predict, replicated
from jaxdet.results.detections import Detections
from jaxdet.results.labels import Labels, labels_of
from jaxdet.train import build as train_build

log = logging.getLogger("jaxdet")


def default_score_threshold(config: S.Config) -> float:
    """The model's own score threshold (``model.post_processing``; Faster R-CNN: its second
    stage's), 0 for a model without one."""
    post = getattr(config.model, "post_processing", None) or getattr(
        config.model, "second_stage_post_processing", None)
    return post.score_threshold if post is not None else 0.0


def preprocess_images(config: S.Config | tasks.Family,
                      images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decoded RGB images ``[B, h, w, 3]`` (uint8 or 0..255 floats) through the eval transforms,
    normalization included, on the host: (network input f32 [B, H, W, 3], image_info f32
    [B, 4]) for ``task.predict`` itself (the detector normalizes inside its compiled call)."""
    samples, transforms = [], tasks.resolve(config).transforms(training=False)
    for image in images:
        sample = {"image": np.asarray(image, np.float32), "boxes": np.zeros((0, 4), np.float32),
                  "classes": np.zeros((0,), np.int32),
                  "image_info": np.array([*image.shape[:2], *image.shape[:2]], np.float32)}
        for op in transforms:
            sample = op(sample)
        samples.append(sample)
    return (np.stack([s["image"] for s in samples]),
            np.stack([s["image_info"] for s in samples]))


# --------------------------------------------------------------------------- the detector


def _predictor(family: tasks.Family, task, variables: tuple, batch_size: int) -> tuple:
    """``(predict, variables)``: predict jitted over the config's mesh with the variables
    replicated on it when this process sees several devices and the batch divides over the
    mesh, else on one device (and the log says why)."""
    config = family.config
    options = train_build.predict_compiler_options(config)
    normalizer = family.normalizer()
    single = make_predict_fn(task, allow_tf32=config.allow_tf32, compiler_options=options,
                             normalizer=normalizer), variables
    if jax.process_count() > 1 or jax.device_count() == 1:
        return single
    try:
        mesh = parallel_build.build_mesh(config)
        if mesh.size == 1:
            return single
        check_batch_layout(mesh, batch_size=batch_size, image_size=task.input_size,
                           max_stride=task.max_stride(),
                           what="the predict batch size (--batch-size)")
    except ValueError as e:  # MeshLayoutError included
        log.info("predict runs on one device: %s", e)
        return single
    predict = mesh_predict(predict_callable(task, allow_tf32=config.allow_tf32,
                                            normalizer=normalizer), mesh,
                           compiler_options=options)
    log.info("predict splits each batch of %d over a (data=%d, spatial=%d) mesh", batch_size,
             mesh.shape["data"], mesh.shape["spatial"])
    return predict, jax.device_put(variables, replicated(mesh))


ImageInput = np.ndarray | Image.Image | str | os.PathLike
"""One image as ``Detector.predict`` takes it: an RGB array, a PIL image or a file path."""


class Detector:
    """A model with its weights, ready to detect objects (see the module docstring); made by
    ``jaxdet.load``.

    Example::

        detector = jaxdet.load("runs/demo", batch_size=8)
        detections = detector.predict(["a.jpg", "b.jpg"])

    Attributes:
      config: the model's config.
      step: the checkpoint's step (a workdir), or its name (``ckpt-0``), or 0 (fresh weights).
      labels: the model's class ids and names (:class:`~jaxdet.results.labels.Labels`).
      decode: how image files' JPEGs are decoded (``accurate``, or ``tf`` for a model whose
        weights came from a TF checkpoint).
      batch_size: images per compiled call unless ``predict`` is told otherwise.
      source: where the model came from (config, workdir, checkpoint), None if built
        directly.
      weights_format: ``tf``, ``jaxdet`` or ``torch`` for weights imported from a checkpoint
        file, None for a workdir's own or fresh weights.
      weights: where the weights came from, in words: ``workdir runs/demo step 1500``,
        ``checkpoint .../checkpoint/ckpt-0`` or ``untrained (fresh initialization)``.
      variables: (params, batch_stats) the model runs with.
    """

    def __init__(self, config: S.Config | tasks.Family, task, variables: tuple, *, step: int | str,
                 labels: Labels, decode: str = "accurate", batch_size: int = 1,
                 source: ModelSource | None = None, weights_format: str | None = None,
                 weights: str | None = None):
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.family = tasks.resolve(config)
        self.config = self.family.config
        self.task = task
        self.variables = variables
        self.step = step
        self.labels = labels
        self.decode = decode
        self.batch_size = int(batch_size)
        self.source = source
        self.weights_format = weights_format
        self.weights = weights if weights is not None else describe_weights(source, step)
        self._transforms = self.family.transforms(training=False, normalize=False)
        self._predictors: dict[int, tuple] = {}

    def __repr__(self) -> str:
        h, w = self.input_size
        return (f"Detector({self.config.model.type}, {len(self.labels.names)} classes, input "
                f"{h}x{w}, weights: {self.weights})")

    @property
    def input_size(self) -> tuple[int, int]:
        """(height, width) of the network's input; images of any size are resized to it."""
        return tuple(int(v) for v in self.task.input_size)

    @property
    def class_names(self) -> list[str]:
        """The name of each class index."""
        return list(self.labels.names)

    def _compiled(self, batch_size: int) -> tuple:
        """``(predict, (params, batch_stats))`` for batches of ``batch_size``, built once."""
        if batch_size not in self._predictors:
            self._predictors[batch_size] = _predictor(self.family, self.task, self.variables,
                                                      batch_size)
        return self._predictors[batch_size]

    def run_batch(self, images: np.ndarray, image_info: np.ndarray) -> dict:
        """The model's raw output for a batch, as numpy: ``images`` [B, H, W, 3] after the eval
        transforms (not normalized), ``image_info`` [B, 4] float32 (original height, width,
        then the resized ones), as a loader batch holds them."""
        predict, (params, batch_stats) = self._compiled(int(images.shape[0]))
        return jax.device_get(predict(params, batch_stats, images, image_info))

    def predict(self, images: ImageInput | Sequence[ImageInput], *,
                score_threshold: float | None = None, max_detections: int | None = None,
                batch_size: int | None = None,
                keep_images: bool = True) -> Detections | list[Detections]:
        """Detect objects.

        Args:
          images: one image, or a list / tuple of them, or a batch array [B, H, W, 3]. An
            image is a numpy (or jax) array [H, W, 3] RGB (or [H, W] gray) of uint8 or 0..255
            floats, a PIL image, or an image file's path. Sizes may differ.
          score_threshold: keep detections with score >= this (default: the model's own,
            ``model.post_processing.score_threshold``).
          max_detections: keep at most this many per image, best first (default: all).
          batch_size: images per compiled call (default: the detector's ``batch_size``).
          keep_images: keep each image's pixels with its detections, for ``.draw()``.
        Returns:
          :class:`~jaxdet.results.detections.Detections` for one image; a list of them, in
          order, for a list or a batch array.
        Raises:
          TypeError / ValueError: an input that is not an image (the message names its
            position and what was wrong: shape, dtype, value range).
          FileNotFoundError: a path that does not exist.
          CorruptImageError: a file that cannot be decoded (named).

        Example::

            found = detector.predict(np.asarray(Image.open("dog.jpg")))
            for box, name, score in zip(found.boxes, found.class_names, found.scores):
                print(name, round(float(score), 2), box)   # box: x0, y0, x1, y1 pixels
            batch = detector.predict(["a.jpg", "b.png"], batch_size=2)
        """
        items, single = _as_items(images)
        batch = self.batch_size if batch_size is None else int(batch_size)
        if batch < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_detections is not None and max_detections < 0:
            raise ValueError(f"max_detections must be >= 0, got {max_detections}")
        threshold = (default_score_threshold(self.config) if score_threshold is None
                     else float(score_threshold))
        pictures = [self._pixels(item, i, len(items), single) for i, item in enumerate(items)]
        found: list[Detections] = []
        for start in range(0, len(pictures), batch):
            chunk = pictures[start:start + batch]
            samples = [eval_sample(pixels, self._transforms, index=start + i)
                       for i, (pixels, _) in enumerate(chunk)]
            inputs = np.stack([s["image"] for s in samples])
            info = np.stack([s["image_info"] for s in samples])
            if len(chunk) < batch:  # pad: one compiled program per batch size
                pad = batch - len(chunk)
                inputs = np.concatenate([inputs, np.zeros((pad, *inputs.shape[1:]),
                                                          inputs.dtype)])
                info = np.concatenate([info, np.repeat(info[-1:], pad, axis=0)])
            output = self.run_batch(inputs, info)
            for row, (pixels, path) in enumerate(chunk):
                found.append(Detections.from_model_output(
                    output, row, self.labels, image_size=pixels.shape[:2],
                    score_threshold=threshold, max_detections=max_detections, source=path,
                    image=display_pixels(pixels) if keep_images else None))
        return found[0] if single else found

    def evaluate(self, out_dir: str | os.PathLike | None = None, *, overwrite: bool = False,
                 progress: bool = True) -> dict:
        """COCO-evaluate (Dice for the 3D U-Net) on the config's ``data.eval``, as ``jaxdet
        eval`` does: detections, metrics and a sample picture go to ``out_dir`` (default:
        ``WORKDIR/eval/step_N``, or ``step_N_2`` ... when that already holds an evaluation;
        for imported weights ``eval/<checkpoint name>`` beside the checkpoint's folder).
        Evaluate on other data by loading with ``overrides=["data.eval=..."]``.

        Args:
          out_dir: where the results go (see above).
          overwrite: replace ``eval/step_N`` when it already holds an evaluation.
          progress: show a progress bar.
        Returns:
          The metrics (``AP``, ``AP50``, ..., per class), with ``out_dir`` (a str) and
          ``step``.
        Raises:
          ValueError: the config has no ``data.eval``, or fresh weights and no ``out_dir``.
          FileNotFoundError: the dataset's files are missing (named).

        Example::

            metrics = jaxdet.load("runs/demo").evaluate()
            print(metrics["AP"], metrics["out_dir"])
        """
        return evaluate_loaded(self.family, self.task, self.variables, self.step, self.source,
                               self.weights_format, out_dir, overwrite=overwrite,
                               progress=progress)

    def export(self, out_dir: str | os.PathLike, *, format: str = "stablehlo",
               input_type: str = "image_tensor", batch_size: int | None = None,
               input_size: tuple[int, int] | None = None):
        """Write a serving artifact of this model, as ``jaxdet export``: images in, the TF OD
        API's detection signature out (``detection_boxes``, ``detection_scores``,
        ``detection_classes``, ``num_detections``).

        Args:
          out_dir: a new (or empty) folder.
          format: ``stablehlo`` (jax alone, any batch), ``onnx`` (ONNX Runtime, a fixed
            batch), ``saved_model`` (TF Serving, any batch) or ``tflite`` (a fixed batch); the
            last two need TensorFlow.
          input_type: ``image_tensor`` (uint8 [B, H, W, 3]), ``float_image_tensor`` (float32
            0..255) or ``encoded_image_string_tensor`` (JPEG / PNG bytes; saved_model only).
          batch_size: a fixed batch (default: any for stablehlo and saved_model, 1
            otherwise).
          input_size: (height, width) of the images the artifact takes (default: the model's
            input size); others are resized inside as the config's resizer does.
        Returns:
          The export's result: ``out_dir``, the files written, ``line()`` to print.
        Raises:
          ExportError: what cannot be exported (nothing is left in ``out_dir``).

        Example::

            result = jaxdet.load("runs/demo").export("exported/demo", format="onnx")
            print(result.line())
        """
        return export_loaded(self.family, self.task, self.variables, self.step, self.labels,
                             out_dir, format=format, input_type=input_type,
                             batch_size=batch_size, input_size=input_size)

    def _pixels(self, item, index: int, count: int, single: bool) -> tuple[np.ndarray, str | None]:
        what = "image" if single else f"image {index} of {count}"
        if isinstance(item, (str, os.PathLike)):  # a local path or a URL (gs://...)
            path = os.fspath(item)
            if not files.exists(path):
                raise FileNotFoundError(f"{what}: file not found: {path}")
            if files.isdir(path):
                raise ValueError(f"{what}: {path} is a folder; predict takes image files and "
                                 "arrays (the jaxdet predict command searches folders)")
            return load_image(path, self.decode), path
        return rgb_pixels(item, what), None


def _as_items(images) -> tuple[list, bool]:
    """(the images as a list, whether one image was given)."""
    if isinstance(images, (str, os.PathLike, Image.Image)):
        return [images], True
    if isinstance(images, (list, tuple)):
        return list(images), False
    if hasattr(images, "shape") and hasattr(images, "ndim"):
        if images.ndim == 4:
            return list(images), False
        return [images], True
    raise TypeError(f"images: {type(images).__name__}; expected an array, a PIL image, a path, "
                    "or a list of them")


def evaluate_loaded(family: tasks.Family, task: Any, variables: tuple[Any, Any], step: int | str,
                    source: ModelSource | None, weights_format: str | None,
                    out_dir: str | os.PathLike | None = None, *, overwrite: bool = False,
                    progress: bool = True) -> dict:
    """Evaluate loaded inference ``variables`` (params, batch_stats) of checkpoint ``step`` on
    the config's ``data.eval`` as ``jaxdet eval`` does (results in ``out_dir``, default
    ``eval/step_N`` beside the weights ``source`` names); see :meth:`Detector.evaluate`."""
    if source is not None and source.has_weights:
        home = runs.results_home(source.workdir, source.checkpoint)
    elif out_dir is not None:
        home = Path(out_dir)
    else:
        raise ValueError("these weights come from no workdir or checkpoint: give "
                         "evaluate(out_dir=...)")
    params, batch_stats = variables
    return runs.evaluate_model(family, task, {"params": params, "batch_stats": batch_stats},
                               step, home, out_dir=out_dir, overwrite=overwrite,
                               progress=progress, weights_format=weights_format)


def load_detector(source: ModelSource, *, step: int | None = None,
                  checkpoint_format: str = "auto", batch_size: int | None = None,
                  data_dir: str | Path | None = None) -> Any:
    """Build the model a :class:`~jaxdet.jobs.model_source.ModelSource` names and load its
    weights (a workdir's checkpoint, latest or ``step``; or ``source.checkpoint`` imported in
    full; or, when it names neither, the initializers' fresh weights, with a warning: one
    line on the ``jaxdet`` logger).
    ``data_dir``: where relative dataset paths of the config are read from for the class
    names (default: the workdir, else the current folder).

    ``batch_size``: images per compiled call (default 1); for a family whose inputs are
    not images, its own (the 3D U-Net's sliding windows per network call).

    Returns a :class:`Detector`, or the family's own predictor for a family whose inputs are
    not images (``TaskFamily.predictor``: the 3D U-Net's ``Segmenter``).

    Raises:
      ValueError: a family that has no Python predictor.
      FileNotFoundError: no checkpoint, or none for ``step``.
      WorkdirMismatch: the workdir's checkpoint belongs to another model configuration.
      CheckpointError: a checkpoint file of another model or damaged (the message names the
        file and the first tensors concerned).
    """
    config = source.config
    family = tasks.resolve(config)  # the one lookup of model.type for this detector
    if family.spec.predict_files is not None and family.spec.predictor is None:  # not images
        raise ValueError(f"model.type={config.model.type!r} predicts from files of its own kind, "
                         "not images, and has no Python predictor: use `jaxdet predict "
                         "--workdir WORKDIR FILES --out OUT` and `jaxdet eval --workdir WORKDIR`")
    if source.has_weights:
        task, state, step = runs.load_for_inference(
            family, source.workdir, step=step, checkpoint=source.checkpoint,
            checkpoint_format=checkpoint_format)
        variables = runs.inference_variables(config, state)
    else:
        if step is not None:
            raise ValueError("step picks a checkpoint of a workdir; none was given")
        log.warning("the %s model's weights are %s: no checkpoint or workdir was given; "
                    "pass checkpoint=... (a TF OD API checkpoint, a jaxdet workdir or a "
                    "PyTorch file) or workdir=... (a trained run) for trained weights",
                    config.model.type, UNTRAINED)
        task = family.build_task()
        variables, step = task.initial_variables(), 0
    weights_format = runs.weights_format(source.checkpoint, checkpoint_format)
    weights = describe_weights(source, step)
    if family.spec.predictor is not None:
        evaluator = functools.partial(evaluate_loaded, family, task, variables, step, source,
                                      weights_format)
        return family.spec.predictor(config, task, variables, step=step, batch_size=batch_size,
                                evaluator=evaluator, weights=weights)
    if data_dir is None:
        data_dir = source.workdir if source.workdir is not None else Path.cwd()
    labels = labels_of(config, data_dir)
    return Detector(family, task, variables, step=step, labels=labels,
                    decode=data_build.decode_mode(config, weights_format),
                    batch_size=batch_size or 1, source=source, weights_format=weights_format,
                    weights=weights)


__all__ = ["Detector", "default_score_threshold", "evaluate_loaded", "load_detector",
           "preprocess_images"]
