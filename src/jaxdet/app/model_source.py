"""Where a model to run comes from: its config, and the weights (a workdir's checkpoint or a
checkpoint file), resolved the same way for the ``jaxdet`` commands and the Python API.

    source = model_source("runs/demo")                       # a jaxdet workdir
    source = model_source("ssd_mobilenet_v2_320x320_coco17_tpu-8/")  # a TF2 zoo model folder
    source = model_source("pipeline.config", checkpoint="ckpt/ckpt-0")
    source = model_source("shapes_demo")                     # a shipped config: fresh weights
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable
from pathlib import Path

from jaxdet import files
from jaxdet.config.loader import ConfigError, apply_overrides, load_config, validate
from jaxdet.config.schema import Config
from jaxdet.config.tfod import load_pipeline_config


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """A model's config, the workdir whose checkpoints hold its weights (None: none), and a
    checkpoint to take the weights from instead (a TF OD API checkpoint prefix, another
    workdir or a PyTorch file; None: the workdir's own)."""

    config: Config
    workdir: Path | None = None
    checkpoint: Path | None = None

    @property
    def has_weights(self) -> bool:
        """Whether trained weights are named (else the model starts from its initializers)."""
        return self.workdir is not None or self.checkpoint is not None


def latest_tf_checkpoint(folder: str | os.PathLike) -> Path | str | None:
    """The prefix of the newest ``ckpt-N`` (largest N) with an ``.index`` file in ``folder``
    (a local folder or a URL such as ``gs://bucket/model/checkpoint``), None when there is
    none."""
    found = []
    for index in files.glob(files.join(folder, "ckpt-*.index"), files_only=True):
        match = re.fullmatch(r"ckpt-(\d+)\.index", files.basename(index))
        if match:
            found.append((int(match[1]), index[:-len(".index")]))
    if not found:
        return None
    prefix = max(found)[1]
    return prefix if files.is_url(prefix) else Path(prefix)


def _readable(workdir: str | os.PathLike | None) -> Path | None:
    """A workdir as a local folder: a bucket's (``gs://...``) is copied into a reader's
    staging folder first (its sealed checkpoints and files; ``train.remote_workdir``)."""
    if workdir is None:
        return None
    from jaxdet.train.remote_workdir import readable_workdir

    return readable_workdir(workdir)


def as_path(path: str | os.PathLike | None) -> Path | str | None:
    """A local path as a ``Path``; a URL (``gs://...``) kept as its string."""
    if path is None:
        return None
    return os.fspath(path) if files.is_url(path) else Path(path)


def _with_overrides(config: Config, overrides: Iterable[str]) -> Config:
    overrides = list(overrides)
    if not overrides:
        return config
    return validate(apply_overrides(config.model_dump(mode="json"), overrides),
                    source="the config given")


def model_source(model: str | os.PathLike | Config | None = None, *,
                 workdir: str | os.PathLike | None = None,
                 checkpoint: str | os.PathLike | None = None,
                 overrides: Iterable[str] = ()) -> ModelSource:
    """Resolve what names a model.

    Args:
      model: one of
        - a jaxdet workdir (a folder with ``config.yaml``): its config and checkpoints;
        - a TF2 model-zoo folder (``pipeline.config`` and ``checkpoint/ckpt-N``): the converted
          pipeline.config and its newest checkpoint;
        - a pipeline.config file (``*.config``): its converted config;
        - a shipped config name (``jaxdet configs``) or a YAML file;
        - a :class:`~jaxdet.config.schema.Config`;
        - None with ``workdir``: the workdir's saved config.
      workdir: the run whose checkpoints hold the weights, when ``model`` is a config.
      checkpoint: weights to use instead of the workdir's (see ``tasks.weights.load_weights``).
      overrides: ``section.field=value`` strings applied on top of the config.
    Returns:
      A :class:`ModelSource`.
    Raises:
      ConfigError: nothing names a config, or a folder that is neither a workdir nor a zoo
        model, or the config is invalid (each message names the path or field).
    """
    overrides = list(overrides)
    workdir = _readable(workdir)
    checkpoint = as_path(checkpoint)
    if model is None:
        if workdir is None:
            raise ConfigError("give a model: a workdir (a trained run), a TF OD API model "
                              "folder or pipeline.config, or a config with a checkpoint")
        if not workdir.is_dir():
            raise ConfigError(f"workdir not found: {workdir}")
        if not (workdir / "config.yaml").is_file():
            raise ConfigError(f"{workdir} holds no config.yaml, so it is not a jaxdet workdir; "
                              "name the model's config too (--config / --pipeline-config)")
        model = workdir
    if isinstance(model, Config):
        return ModelSource(_with_overrides(model, overrides), workdir, checkpoint)
    path = as_path(model)
    if files.isdir(path):
        if files.isfile(files.join(path, "config.yaml")):
            config = load_config(files.join(path, "config.yaml"), overrides)
            return ModelSource(config, workdir if workdir is not None else _readable(path),
                               checkpoint)
        if files.isfile(files.join(path, "pipeline.config")):
            if checkpoint is None:
                checkpoint = latest_tf_checkpoint(files.join(path, "checkpoint"))
            return ModelSource(load_pipeline_config(files.join(path, "pipeline.config"),
                                                    overrides), workdir, checkpoint)
        raise ConfigError(f"{path} is a folder with neither config.yaml (a jaxdet workdir) nor "
                          "pipeline.config (a TF OD API model)")
    if files.basename(path).endswith(".config"):
        if not files.isfile(path):
            raise ConfigError(f"pipeline.config not found: {path}")
        return ModelSource(load_pipeline_config(path, overrides), workdir, checkpoint)
    return ModelSource(load_config(model, overrides), workdir, checkpoint)


__all__ = ["ModelSource", "as_path", "latest_tf_checkpoint", "model_source"]
