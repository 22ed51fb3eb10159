"""Build the SSD family's task from a config (the parts come from ``jaxdet.builders``)."""

from __future__ import annotations

from typing import Any

from jaxdet import builders
from jaxdet.config import schema as S
from jaxdet.config.schema_base import fingerprint_dump
from jaxdet.tasks.ssd.task import SSDTask


def build_ssd_task(config: S.Config, *, seed: int) -> SSDTask:
    """Model, anchors, targets, loss and post-processing for ``config``."""
    model = builders.build_model(config, seed=seed)
    return SSDTask(
        model=model,
        anchors=builders.build_anchors(config, model),
        box_coder=builders.build_box_coder(config.model),
        loss_params=builders.build_loss_params(config.model),
        matching=builders.build_matching_params(config.model),
        post=builders.build_post_process_params(config.model),
        input_size=builders.input_size(config.data),
        num_classes=config.model.num_classes,
        compute_dtype=builders.COMPUTE_DTYPES[config.precision],
        seed=seed,
        max_boxes=config.data.max_number_of_boxes,
    )


def ssd_fingerprint_fields(config: S.Config) -> dict[str, Any]:
    """What fixes an SSD checkpoint's tensors: the network, classes, anchors and input size
    (loss, matcher and post-processing are left out on purpose: a trained checkpoint may be
    evaluated with another score threshold, or fine-tuned with another loss)."""
    dumped = fingerprint_dump(config.model)
    return {
        "model": {k: dumped[k] for k in ("type", "num_classes", "add_background_class",
                                         "backbone", "neck", "anchors", "head") if k in dumped},
        "input_size": list(builders.input_size(config.data)),
    }
