"""The TF OD API's ``PATH_TO_BE_CONFIGURED`` placeholders, refused before any work: a zoo
pipeline.config as downloaded leaves its input paths, label map and
``fine_tune_checkpoint`` to the user. Each error names the field to set, with an example."""

from __future__ import annotations

import re

from jaxdet.config import schema as S
from jaxdet.config.loader import ConfigError

# The TF OD API's own d7 config misspells it PATH_TO_BEE_CONFIGURED.
_PLACEHOLDER = re.compile(r"PATH_TO_BE+_CONFIGURED")

_TF_FIELDS = {  # jaxdet data field -> the TF OD API pipeline.config field it comes from
    "input_path": "{role}_input_reader.tf_record_input_reader.input_path",
    "label_map_path": "{role}_input_reader.label_map_path",
}


def check_dataset_paths(cfg: S.TfRecordDataConfig, field: str | None) -> None:
    """Refuse a placeholder among the paths of the TFRecord dataset ``cfg`` (the section
    ``field``, e.g. ``data.train``; None: either split), naming the field to set."""
    for name, paths in (("input_path", cfg.input_path), ("label_map_path", (cfg.label_map_path,))):
        bad = [p for p in paths if p and _PLACEHOLDER.search(p)]
        if not bad:
            continue
        roles = [field.rsplit(".", 1)[-1]] if field else ["train", "eval"]
        ours = " or ".join(f"data.{r}.{name}" for r in roles)
        theirs = " / ".join(_TF_FIELDS[name].format(role=r) for r in roles)
        example = "train-?????-of-00100.tfrecord" if name == "input_path" else "label_map.pbtxt"
        raise ConfigError(
            f"{ours} is still the TF OD API placeholder {bad[0]!r} (from {theirs}); set it to "
            f"your file, e.g. --set {ours.split(' or ')[0]}=/data/{example}"
        )


def check_data_paths(config: S.Config, *, splits: tuple[str, ...] = ("train", "eval")) -> None:
    """Raises ConfigError, before any work, if a TFRecord dataset still holds a TF OD API
    ``PATH_TO_BE_CONFIGURED`` placeholder (the message names the field to set)."""
    for split in splits:
        cfg = getattr(config.data, split)
        if isinstance(cfg, S.TfRecordDataConfig):
            check_dataset_paths(cfg, f"data.{split}")


def check_init_checkpoint(config: S.Config) -> None:
    """Raises ConfigError if ``train.init_checkpoint.path`` is still the placeholder (a zoo
    pipeline.config's ``fine_tune_checkpoint``), naming what to set."""
    init = config.train.init_checkpoint
    if init is not None and _PLACEHOLDER.search(init.path):
        raise ConfigError(
            f"train.init_checkpoint.path is still the TF OD API placeholder {init.path!r} (from "
            "train_config.fine_tune_checkpoint); set it to the checkpoint to start from, e.g. "
            "--set train.init_checkpoint.path=/models/ssd_mobilenet_v2/checkpoint/ckpt-0, or "
            "train from scratch with --set train.init_checkpoint=null")


def check_training_placeholders(config: S.Config, *, splits: tuple[str, ...]) -> None:
    """What a training run refuses, in this order: a placeholder among the data paths of
    ``splits``, then in the init checkpoint's path."""
    check_data_paths(config, splits=splits)
    check_init_checkpoint(config)


__all__ = ["check_data_paths", "check_dataset_paths", "check_init_checkpoint",
           "check_training_placeholders"]
