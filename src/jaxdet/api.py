"""jaxdet from Python: load a detector, predict on arrays and files, train, evaluate and export,
with the semantics of the ``jaxdet`` commands (the same workdirs, checkpoints, resume and
metrics; the commands call the same functions).

    import jaxdet

    detector = jaxdet.load("runs/demo")                    # a workdir, latest checkpoint
    found = detector.predict(image)                        # numpy [H, W, 3] RGB, PIL, or a path
    found.boxes, found.scores, found.class_names           # (x0, y0, x1, y1) image pixels
    found.draw().save("out.jpg")

    metrics = detector.evaluate()                          # COCO metrics on data.eval
    detector.export("exported/", format="onnx")

    zoo = jaxdet.load("ssd_mobilenet_v2_320x320_coco17_tpu-8/")  # a TF2 zoo model folder
    result = jaxdet.fit("shapes_demo", "runs/demo")        # resumes when the workdir has a run
    detector = result.detector()
    few = jaxdet.fine_tune("runs/demo", photos, boxes, "runs/ducky", class_names=["ducky"])

(Training is ``fit``: ``jaxdet.train`` and ``jaxdet.export`` are the packages of the training
loop and of the artifact writers.)

Every name here is importable from ``jaxdet`` itself. Errors are exceptions a program can
catch; each message names the input, field or file concerned: :class:`ConfigError` (a config
or a model argument), :class:`CheckpointError` (a checkpoint of another model, or damaged),
:class:`WorkdirMismatch` (a workdir trained with another model configuration),
:class:`CorruptImageError` (an image file that cannot be decoded), :class:`VolumeReadError`
(a volume file that cannot be read), :class:`ExportError` (what cannot be exported),
``FileNotFoundError``, ``TypeError`` / ``ValueError`` (an array that is not an image, a bad
argument).

The 3D U-Net (``model.type: unet3d``) segments volumes instead: ``jaxdet.load`` gives a
:class:`Segmenter` whose ``predict`` takes a volume array or file and returns a
:class:`Segmentation` (a label volume on the input's grid, per-class millilitres).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from jaxdet.config.loader import ConfigError, override_list
from jaxdet.config.schema import Config
from jaxdet.data.decode import CorruptImageError
from jaxdet.export.exporter import ExportError
from jaxdet.interop.tf_checkpoint import CheckpointError
from jaxdet.interop.tf_zoo import ZooDownloadError, download_zoo_model
from jaxdet.jobs import runs
from jaxdet.jobs.detector import Detector, load_detector
from jaxdet.jobs.eval_watch import watch_run
from jaxdet.jobs.fine_tune import FROZEN, prepare_fine_tune
from jaxdet.jobs.model_source import model_source
from jaxdet.jobs.runs import WorkdirMismatch
from jaxdet.results.detections import Detection, Detections
from jaxdet.results.labels import Labels
from jaxdet.samples import sample_data
from jaxdet.tasks.unet3d.segmenter import Segmentation, Segmenter
from jaxdet.tasks.unet3d.volume_io import VolumeReadError

ModelLike = str | os.PathLike | Config


def load(model: ModelLike | None = None, *, workdir: str | os.PathLike | None = None,
         checkpoint: str | os.PathLike | None = None, checkpoint_format: str = "auto",
         step: int | None = None, overrides: Iterable[str] = (),
         batch_size: int | None = None) -> Detector | Segmenter:
    """A detector ready to predict (a :class:`Segmenter` for the 3D U-Net).

    Args:
      model: a jaxdet workdir (its config and latest checkpoint); a TF2 model-zoo folder
        (``pipeline.config`` + ``checkpoint/ckpt-N``); a pipeline.config file, a shipped config
        name or a YAML file (with ``checkpoint`` or ``workdir`` for the weights; without
        either, the model's fresh, untrained weights); or a
        :class:`~jaxdet.config.schema.Config`.
      workdir: the run whose checkpoint to load when ``model`` is a config.
      checkpoint: weights instead of the workdir's: a TF OD API checkpoint prefix
        (``.../checkpoint/ckpt-0``), another workdir, or a PyTorch file (``.safetensors`` /
        ``.pth``: effdet EfficientDets, torchvision RetinaNet), imported in full.
      checkpoint_format: ``auto`` (from the path), ``tf``, ``jaxdet`` or ``torch``.
      step: a workdir checkpoint's step (default: the latest intact one).
      overrides: ``section.field=value`` config overrides, as ``--set``.
      batch_size: images per compiled predict call (default 1); for the 3D U-Net, sliding
        windows per network call (default ``model.sliding_window.batch_size``).
    Returns:
      A :class:`~jaxdet.jobs.detector.Detector`; for a ``unet3d`` model a
      :class:`~jaxdet.tasks.unet3d.segmenter.Segmenter` (volumes in, label volumes out).
    Raises:
      ConfigError, FileNotFoundError, WorkdirMismatch, CheckpointError (see the module
      docstring).

    Example::

        detector = jaxdet.load("pipeline.config", checkpoint="checkpoint/ckpt-0")
        print(detector.predict("dog.jpg").to_json())
    """
    source = model_source(model, workdir=workdir, checkpoint=checkpoint, overrides=overrides)
    return load_detector(source, step=step, checkpoint_format=checkpoint_format,
                         batch_size=batch_size)


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What :func:`fit` did.

    Attributes:
      workdir: the run's folder.
      step: the last step trained (and checkpointed).
      steps_run: steps this call trained (0: the run was already complete).
      images_per_second: the training rate after the compile (0 when fewer than two steps
        ran).
      compile_seconds: the first step's time (compile included).
      stopped_by: the signal that stopped the run early after a checkpoint (None: it ran to
        its end; call :func:`fit` again to resume).
      train_metrics: the last logged training metrics (loss terms, learning rate).
      eval_metrics: the evaluation of ``step`` (``eval/step_N/metrics.json``), None when the
        run did not evaluate it.

    Example::

        result = jaxdet.fit("shapes_demo", "runs/demo")
        print(result.step, result.eval_metrics["AP"])
        detector = result.detector()
    """

    workdir: Path
    step: int
    steps_run: int
    images_per_second: float
    compile_seconds: float
    stopped_by: str | None
    train_metrics: dict
    eval_metrics: dict | None

    def detector(self, *, batch_size: int | None = None) -> Detector | Segmenter:
        """The trained detector (the workdir's latest checkpoint; a :class:`Segmenter` for
        the 3D U-Net), as :func:`load` loads it with ``batch_size`` images per compiled call
        (default 1)."""
        return load(self.workdir, batch_size=batch_size)


def fit(config: ModelLike, workdir: str | os.PathLike, *, overrides: Iterable[str] = (),
        evaluate: bool = True, progress: bool = True) -> TrainResult:
    """Train ``config`` in ``workdir`` as ``jaxdet train`` does: a new run, or the workdir's
    run resumed from its latest checkpoint (the same config), with periodic evaluation and
    checkpoints, training curves and a final evaluation in the workdir.

    Args:
      config: a shipped config name, a YAML file, a pipeline.config, a
        :class:`~jaxdet.config.schema.Config`, or a workdir (its saved config).
      workdir: where checkpoints, logs and evaluations go (created).
      overrides: ``section.field=value`` config overrides (``train.num_steps=200``).
      evaluate: evaluate during and after training (``data.eval``).
      progress: show progress bars.
    Returns:
      A :class:`TrainResult`.
    Raises:
      ConfigError; WorkdirMismatch (the workdir holds a run of another model
      configuration); WorkdirBusy (another process trains in it).

    Example::

        result = jaxdet.fit("shapes_demo", "runs/demo", overrides=["train.num_steps=300"])
        print(result.eval_metrics["AP"])
    """
    resolved = model_source(config, overrides=overrides).config
    workdir = Path(workdir)
    loop = runs.train(resolved, workdir, evaluate=evaluate, progress=progress)
    metrics_file = workdir / "eval" / runs.eval_name(loop.step) / "metrics.json"
    eval_metrics = (json.loads(metrics_file.read_text())
                    if evaluate and metrics_file.is_file() else None)
    return TrainResult(workdir, loop.step, loop.steps_run, loop.images_per_second,
                       loop.compile_seconds, loop.stopped_by,
                       {k: float(v) for k, v in (loop.last_metrics or {}).items()},
                       eval_metrics)


def watch_and_evaluate(workdir: str | os.PathLike, *, config: ModelLike | None = None,
                       overrides: Iterable[str] = (), timeout: float = 3600.0,
                       poll: float = 10.0, progress: bool = False) -> list[dict]:
    """Evaluate each checkpoint of a training run as it is written, as ``jaxdet eval --watch``
    does: the TF OD API's evaluation side job, for a run trained without pausing to evaluate
    (``fit(..., evaluate=False)`` or ``jaxdet train --no-eval``, e.g. in another process or on
    another machine sharing the folder). The newest checkpoint not evaluated yet is evaluated
    into ``WORKDIR/eval/step_N``; its metrics also go to ``WORKDIR/eval_watch/`` (JSON lines
    and TensorBoard).

    Args:
      workdir: the training run's folder (it may not exist yet: the run's ``config.yaml`` is
        waited for).
      config: the model's config (default: the run's own ``config.yaml``).
      overrides: ``section.field=value`` overrides of the run's config (e.g. other
        ``data.eval``).
      timeout: stop when no new checkpoint has appeared for this many seconds (the run's last
        step, ``train.num_steps``, ends it at once).
      poll: seconds between looks at the checkpoints folder.
      progress: show a progress bar per evaluation.
    Returns:
      The metrics of each evaluation, oldest first, each with ``out_dir`` and ``step``.
    Raises:
      TimeoutError: no run started in ``workdir`` within ``timeout``.
      WorkdirMismatch: the checkpoints belong to another model configuration.
      ValueError: the config has no ``data.eval``.

    Example::

        for metrics in jaxdet.watch_and_evaluate("runs/big", timeout=600):
            print(metrics["step"], metrics["AP"])
    """
    overrides = override_list(overrides)  # a str refused before any waiting
    loaded = None if config is None else model_source(config, overrides=overrides).config
    return watch_run(workdir, loaded, overrides=overrides, timeout=timeout, poll=poll,
                     progress=progress)


def fine_tune(model: ModelLike, images: Sequence, boxes: Sequence,
              workdir: str | os.PathLike, *, class_names: Sequence[str] = ("object",),
              classes: Sequence | None = None, box_format: str = "xyxy", steps: int = 200,
              batch_size: int = 4, freeze: Iterable[str] = FROZEN,
              checkpoint: str | os.PathLike | None = None, overrides: Iterable[str] = (),
              progress: bool = True) -> TrainResult:
    """Teach a pretrained detector new classes from a few annotated images in memory (the TF2
    few-shot "rubber ducky" recipe): restore its weights with ``restore: fitting`` (all but the
    class predictor, which starts fresh for ``len(class_names)`` classes), freeze ``freeze``
    (backbone and neck), train ``steps`` steps. The images and boxes are written into
    ``workdir`` as a COCO dataset, so the run resumes like any other (the same call again:
    nothing to do).

    Args:
      model: the pretrained detector: a workdir, a TF2 zoo model folder, or a config with
        ``checkpoint`` (as :func:`load`).
      images: arrays (RGB [H, W, 3] uint8 or 0..255 floats), PIL images or file paths.
      boxes: per image, [n, 4]: pixel (x0, y0, x1, y1) (``box_format="xyxy"``, as
        ``Detections.boxes``) or normalized (ymin, xmin, ymax, xmax)
        (``"normalized_yxyx"``, the TF colab's).
      workdir: the new run's folder.
      class_names: the classes to learn.
      classes: per image, [n] indices into ``class_names`` (default: every box is class 0).
      box_format: ``"xyxy"`` (pixels, the default) or ``"normalized_yxyx"``.
      steps: training steps (200: the recipe's).
      batch_size: images per step (4: the recipe's).
      freeze: regexes of variables kept as restored (``jaxdet summary`` names them).
      checkpoint: the pretrained weights when ``model`` is a config (as :func:`load`).
      overrides: further ``section.field=value`` overrides (``train.learning_rate...``).
      progress: show progress bars.
    Returns:
      A :class:`TrainResult`; ``result.detector()`` predicts with the fine-tuned weights.
    Raises:
      ValueError / TypeError: images, boxes or classes that do not fit (named by position);
      WorkdirMismatch: ``workdir`` holds a fine-tuning run on other images.

    Example::

        result = jaxdet.fine_tune("ssd_mobilenet_v2_fpnlite_320x320_coco17_tpu-8/", photos,
                                  boxes, "runs/ducky", class_names=["rubber ducky"],
                                  box_format="normalized_yxyx")
        result.detector().predict("test/out1.jpg").draw()
    """
    source = model_source(model, checkpoint=checkpoint)
    config = prepare_fine_tune(source, images, boxes, workdir, class_names=class_names,
                               classes=classes, box_format=box_format, steps=steps,
                               batch_size=batch_size, freeze=freeze, overrides=overrides)
    return fit(config, workdir, evaluate=False, progress=progress)


__all__ = ["CheckpointError", "ConfigError", "CorruptImageError", "Detection", "Detections",
           "Detector",
           "ExportError", "Labels", "Segmentation", "Segmenter", "TrainResult",
           "VolumeReadError", "WorkdirMismatch", "ZooDownloadError", "download_zoo_model",
           "fine_tune", "fit", "load", "sample_data", "watch_and_evaluate"]
