"""A family as the registry holds it (:class:`TaskFamily`), and as a job holds it once
resolved for its config (:class:`Family`): the one object a job passes down instead of asking
``model.type`` again."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import jax
import numpy as np
from flax import nnx

from jaxdet.config import schema as S
from jaxdet.data import build as data_build
from jaxdet.data.normalize import PixelNormalizer
from jaxdet.interop.tfod_names import Target, UnmappedModelError
from jaxdet.interop.torch_names import TorchDetectorMap
from jaxdet.models import build as models_build
from jaxdet.models.task import Task
from jaxdet.tasks.data_pipeline import DataPipeline
from jaxdet.tasks.detector import image_pipeline

log = logging.getLogger("jaxdet")


@dataclass(frozen=True)
class TaskFamily:
    """How a ``model.type`` is built: ``build(config, seed=...) -> Task``;
    ``fingerprint_fields(config) -> dict`` (JSON-able; hashed into the checkpoint
    fingerprint); ``summary(config, **options) -> dict`` and ``format_summary(dict) -> str``
    (``jaxdet summary``: parameters, FLOPs, the family's own rows); ``pads_raw_pixels``: the
    resizer's padding holds black pixels that are normalized with the image (TF's CenterNet
    resizes then normalizes) instead of zeros after normalization (TF's SSD); ``data``: a
    :class:`DataPipeline` factory (default ``tasks.detector.image_pipeline``);
    ``predict_files``: ``jaxdet predict`` (default: the detectors' image prediction);
    ``predictor(config, task, variables, step=, batch_size=, evaluator=, weights=)``
    (``weights``: where they came from, in words): what ``jaxdet.load`` returns for a family
    whose inputs are not images (default: ``jaxdet.Detector``, for images);
    ``tf_name_map(model, config) -> {tf object path: (jaxdet path, transform)}``: where each
    tensor of a TF OD API checkpoint goes in the family's model (None: no TF checkpoint fits
    the family);
    ``torch_detector_map(model, state, source) -> interop.torch_names.TorchDetectorMap |
    None``: the family's map of a whole detector's torch state dict (``source`` names the
    file), None for a file it does not read (None: it reads none; a backbone alone is
    ``weights``' shared path)."""

    build: Callable[..., Task]
    fingerprint_fields: Callable[[S.Config], dict[str, Any]]
    summary: Callable[..., dict]
    format_summary: Callable[[dict], str]
    pads_raw_pixels: bool = False
    data: Callable[[], DataPipeline] = image_pipeline
    predict_files: Callable[..., Any] | None = None
    predictor: Callable[..., Any] | None = None
    tf_name_map: Callable[[nnx.Module, S.Config], dict[str, Target]] | None = None
    torch_detector_map: Callable[[nnx.Module, Mapping[str, np.ndarray], str],
                                 TorchDetectorMap | None] | None = None


@dataclass(frozen=True)
class Family:
    """``config``'s family, resolved once per job (``tasks.resolve``): the family's builders
    bound to the config. Jobs build the task, the input pipeline's last steps, the fingerprint
    and the checkpoint name maps from it, and pass it down; nothing below asks the registry
    again."""

    config: S.Config
    spec: TaskFamily

    def __repr__(self) -> str:
        return f"Family({self.name}, config {self.config.name!r})"

    @property
    def name(self) -> str:
        """The ``model.type``: ``ssd``, ``center_net``, ``faster_rcnn``, ``unet3d``, or a
        registered family's."""
        return self.config.model.type

    def with_config(self, config: S.Config) -> Family:
        """The same family bound to ``config`` (e.g. after its precision is resolved).

        Raises:
          ValueError: ``config`` is of another ``model.type``."""
        if config.model.type != self.name:
            raise ValueError(f"model.type={config.model.type!r} is not the {self.name!r} "
                             "family")
        return Family(config, self.spec)

    def build_task(self, *, seed: int | None = None) -> Task:
        """The task of the config (``seed``: default ``train.seed``), its model's parameters
        drawn as ``train.initializers`` says where it names them."""
        seed = self.config.train.seed if seed is None else seed
        task = self.spec.build(self.config, seed=seed)
        if self.config.train.initializers:
            models_build.apply_initializers(task.model, self.config.train.initializers, seed)
        return task

    def fingerprint_fields(self) -> dict[str, Any]:
        """What fixes the checkpoint's tensors for this family and config."""
        return self.spec.fingerprint_fields(self.config)

    def checkpoint_fingerprint(self) -> str:
        """16 hex digits hashing what fixes a checkpoint's tensors: what the family names (for
        the SSD family the network, classes, anchors and input size), the optimizer's state
        layout and the moving average. A workdir's checkpoints carry it; a run or an
        evaluation refuses a checkpoint with another."""
        train = self.config.train
        keyed = {**self.fingerprint_fields(), "ema": train.ema_decay is not None,
                 "optimizer": train.optimizer.name}
        if train.optimizer.momentum_form != "optax":  # another optimizer-state layout
            keyed["momentum_form"] = train.optimizer.momentum_form
        frozen = [list(train.freeze_variables), list(train.update_trainable_variables)]
        if any(frozen):  # frozen parameters have no optimizer state: another tree to restore
            keyed["frozen"] = frozen
        if self.config.precision == "fp16":  # the loss-scale state is part of the checkpoint
            keyed["loss_scale"] = True
        return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:16]

    def former_fingerprints(self) -> dict[str, str]:
        """Fingerprints this config's checkpoints had under earlier jaxdet defaults, each with
        the setting that trains or evaluates such a checkpoint again: ``{fingerprint:
        advice}`` (a checkpoint written before the configs kept TF's momentum form)."""
        optimizer = self.config.train.optimizer
        if optimizer.momentum_form == "optax":
            return {}
        as_optax = self.config.model_copy(update={"train": self.config.train.model_copy(
            update={"optimizer": optimizer.model_copy(update={"momentum_form": "optax"})})})
        return {self.with_config(as_optax).checkpoint_fingerprint():
                "it was trained with train.optimizer.momentum_form optax (the form of jaxdet's "
                "configs before they kept TF's); add --set "
                "train.optimizer.momentum_form=optax to continue or evaluate it"}

    @cached_property
    def data(self) -> DataPipeline:
        """The family's :class:`DataPipeline`."""
        return self.spec.data()

    def build_source(self, workdir: Any, split: str) -> Any:
        """The ``data.<split>`` source of the config (``split``: "train" / "eval"). With
        several processes, process 0 builds it first (so generated data is written once to a
        shared workdir) and the others wait for it."""

        def build():
            return self.data.build_source(self.config, workdir, split)

        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            if jax.process_index() == 0:
                build()
            multihost_utils.sync_global_devices(f"jaxdet: data.{split} ready")
        return build()

    def log_dataset(self, source: Any, split: str) -> None:
        """One INFO summary of the dataset of ``data.<split>`` (images, boxes, crowd boxes and
        what happens to them, per class, sizes; or volumes) on process 0."""
        if jax.process_index() == 0:
            log.info("%s", self.data.describe(self.config, source, split))

    @property
    def pads_raw_pixels(self) -> bool:
        """The resizer's padding holds raw black pixels, normalized with the image."""
        return self.spec.pads_raw_pixels

    def transforms(self, *, training: bool, normalize: bool = True) -> list:
        """``data.build.build_transforms`` of ``config.data`` as the family pads."""
        return data_build.build_transforms(self.config.data, training=training,
                                           normalize=normalize,
                                           pads_raw_pixels=self.pads_raw_pixels)

    def normalizer(self) -> PixelNormalizer | None:
        """``data.build.pixel_normalizer`` as the family pads (None for volumes)."""
        return data_build.pixel_normalizer(self.config, pads_raw_pixels=self.pads_raw_pixels)

    def tf_name_map(self, model: nnx.Module) -> dict[str, Target]:
        """``{tf object path: (jaxdet path, transform)}``: where each tensor of a TF OD API
        checkpoint goes in ``model`` (built from the config).

        Raises:
          UnmappedModelError: a family without TF checkpoints (naming ``model.type``), or a
            model part without a map (the message names it)."""
        if self.spec.tf_name_map is None:
            raise UnmappedModelError(
                f"model.type={self.name!r} has no TF OD API checkpoint name map: its weights "
                "cannot come from a TF checkpoint; train it from scratch or from jaxdet "
                "weights")
        return self.spec.tf_name_map(model, self.config)

    def torch_detector_map(self, model: nnx.Module, state: Mapping[str, np.ndarray], *,
                           source: str) -> TorchDetectorMap | None:
        """The map of a whole detector's torch state dict ``state`` (the file ``source``) onto
        ``model``; None where the family has none or does not read that file."""
        detector_map = self.spec.torch_detector_map
        return None if detector_map is None else detector_map(model, state, source)


__all__ = ["Family", "TaskFamily"]
