"""How a family's data reach the train step: :class:`DataPipeline`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DataPipeline:
    """How a family's data reach the train step (the jobs call these; the detectors share
    ``tasks.detector.image_pipeline``): ``build_source(config, workdir, split) -> source``
    (``split``: "train" / "eval", ``config.data.<split>``); ``build_train_loader(config,
    source, *, layout, weights_format=None) -> loader`` (an infinite iterator of host batches
    with ``get_state`` / ``set_state``, checked against the task's batch ``layout``;
    ``weights_format``: where the job's starting weights come from, ``"tf"`` for a TF
    checkpoint, which decides how JPEGs decode); ``describe(config, source, split) -> str``
    (one INFO summary of the dataset of ``config.data.<split>``)."""

    build_source: Callable[..., Any]
    build_train_loader: Callable[..., Any]
    describe: Callable[[Any, Any, str], str]


__all__ = ["DataPipeline"]
