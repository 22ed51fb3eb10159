"""Where a model to run comes from: its config, and the weights (a workdir's checkpoint or a
checkpoint file), resolved the same way for the ``jaxdet`` commands and the Python API.

    source = model_source("runs/demo")                       # a jaxdet workdir
    source = model_source("ssd_mobilenet_v2_320x320_coco17_tpu-8/")  # a TF2 zoo model folder
    source = model_source("pipeline.config", checkpoint="ckpt/ckpt-0")
    source = model_source("shapes_demo")                     # a shipped config: fresh weights
    source = model_source(workdir="runs/demo")               # --workdir alone: as the first
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable
from pathlib import Path

from jaxdet import files
from jaxdet.config.loader import (
    CONFIG_SUFFIXES,
    ConfigError,
    ConfigNotFoundError,
    apply_overrides,
    load_config,
    looks_like_path,
    override_list,
    validate,
)
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


def _with_overrides(config: Config, overrides: list[str]) -> Config:
    if not overrides:
        return config
    return validate(apply_overrides(config.model_dump(mode="json"), overrides),
                    source="the config given")


def workdir_not_found(path: str | os.PathLike) -> ConfigNotFoundError:
    """The error for a workdir (or model folder) path that does not exist: the same line from
    ``jaxdet.load`` and from the commands' ``--workdir``."""
    return ConfigNotFoundError(f"workdir not found: {os.fspath(path)}")


def _from_folder(path: Path | str, workdir: Path | None, checkpoint: Path | str | None,
                 overrides: list[str]) -> ModelSource:
    """A jaxdet workdir or a TF2 zoo model folder."""
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
        - None with ``workdir``: ``workdir`` taken as the model (a jaxdet workdir or a TF2
          model-zoo folder; what the commands' ``--workdir`` takes alone).
      workdir: the run whose checkpoints hold the weights, when ``model`` is a config.
      checkpoint: weights to use instead of the workdir's (see ``tasks.weights.load_weights``).
      overrides: ``section.field=value`` strings applied on top of the config.
    Returns:
      A :class:`ModelSource`.
    Raises:
      ConfigNotFoundError: a path that does not exist (``workdir not found: PATH``; a
        ``ConfigError`` and a ``FileNotFoundError``).
      ConfigError: nothing names a config, a bare name that is no shipped config (the close
        names suggested), a folder that is neither a workdir nor a zoo model, or the config
        is invalid (each message names the path or field).
      TypeError: ``overrides`` given as one str.
    """
    overrides = override_list(overrides)
    checkpoint = as_path(checkpoint)
    if model is None:
        if workdir is None:
            raise ConfigError("give a model: a workdir (a trained run), a TF OD API model "
                              "folder or pipeline.config, or a config with a checkpoint")
        if not files.isdir(workdir):
            raise workdir_not_found(workdir)
        return _from_folder(_readable(workdir), None, checkpoint, overrides)
    if workdir is not None and not files.isdir(workdir):
        raise workdir_not_found(workdir)
    workdir = _readable(workdir)
    if isinstance(model, Config):
        return ModelSource(_with_overrides(model, overrides), workdir, checkpoint)
    path = as_path(model)
    if files.isdir(path):
        return _from_folder(path, workdir, checkpoint, overrides)
    if files.basename(path).endswith(".config"):
        if not files.isfile(path):
            raise ConfigNotFoundError(f"pipeline.config not found: {path}")
        return ModelSource(load_pipeline_config(path, overrides), workdir, checkpoint)
    if (looks_like_path(model) and not files.basename(path).endswith(CONFIG_SUFFIXES)
            and not files.exists(path)):
        raise workdir_not_found(model)
    return ModelSource(load_config(model, overrides), workdir, checkpoint)


def describe_weights(source: ModelSource | None, step: int | str | None = None) -> str:
    """Where loaded weights came from, for a reader: ``workdir runs/demo step 1500``,
    ``checkpoint zoo/checkpoint/ckpt-0`` or ``untrained (fresh initialization)``."""
    if source is None or not source.has_weights:
        return UNTRAINED
    if source.checkpoint is not None:
        return f"checkpoint {source.checkpoint}" + (f" step {step}" if isinstance(step, int)
                                                     else "")
    return f"workdir {source.workdir}" + ("" if step is None else f" step {step}")


UNTRAINED = "untrained (fresh initialization)"


__all__ = ["UNTRAINED", "ModelSource", "as_path", "describe_weights", "latest_tf_checkpoint",
           "model_source", "workdir_not_found"]
