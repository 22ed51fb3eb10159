"""A model's classes: the dataset's category ids and names per class index, and the keypoint
names and skeletons of the classes that have keypoints, read from its config."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from jaxdet.config import schema as S
from jaxdet.data import build as data_build
from jaxdet.data.coco_names import COCO_CATEGORY_NAMES
from jaxdet.data.keypoints import KeypointLayout, resolve_layout
from jaxdet.data.shapes import SHAPE_NAMES

log = logging.getLogger("jaxdet")


@dataclasses.dataclass(frozen=True)
class Labels:
    """A model's classes: ``ids[k]`` (the dataset's category id: COCO ids, 1..C for shapes and
    VOC) and ``names[k]`` of class index k, and the keypoint names and skeletons of the classes
    that have keypoints (``keypoint_layout``; None without keypoint tasks).

    Example::

        labels = detector.labels
        print(labels.names[0], labels.ids[0])   # e.g. "person" 1 for a COCO model
    """

    ids: tuple[int, ...]
    names: tuple[str, ...]
    keypoint_layout: KeypointLayout | None = None

    def entry(self, index: int) -> dict:
        """predictions.json's entry of class ``index``.

        Returns:
          ``{"id", "name"}``, plus ``"keypoints"`` (names) and ``"skeleton"`` (0-based pairs)
          when the class has keypoints."""
        entry = {"id": self.ids[index], "name": self.names[index]}
        group = self.keypoint_layout.group_of_class(index) if self.keypoint_layout else None
        if group is not None:
            entry["keypoints"] = list(group.names)
            entry["skeleton"] = [list(e) for e in group.skeleton]
        return entry


def _labels_of(dataset: S.DatasetConfig, data_dir: Path) -> tuple[list[int], list[str]]:
    if isinstance(dataset, S.ShapesDataConfig):  # what data.shapes.generate_shapes writes
        return (list(range(1, dataset.num_classes + 1)),
                list(SHAPE_NAMES[:dataset.num_classes]))
    if isinstance(dataset, S.VocDataConfig) and dataset.class_names:
        return list(range(1, len(dataset.class_names) + 1)), list(dataset.class_names)
    source = data_build.build_source(dataset, data_dir)
    return list(source.category_ids), list(source.category_names)


def class_labels(config: S.Config, data_dir: str | Path) -> tuple[list[int], list[str]]:
    """(category ids, names) indexed by the model's class index.

    From the config's dataset (eval, else train): generated shapes and VOC with
    ``class_names`` from the config alone; COCO (and VOC without names) by reading its
    annotations; TFRecord from its label map. When none is available or usable, a 90-class
    model gets COCO's names (ids 1..90, the TF model zoo's label map), a 91-class one the same
    names as torchvision numbers them (class = id, 0..90), any other ``class_1 .. class_C``
    with ids 1..C (and a warning says so)."""
    num_classes = config.model.num_classes
    for kind, dataset in (("eval", config.data.eval), ("train", config.data.train)):
        if dataset is None:
            continue
        try:
            ids, names = _labels_of(dataset, Path(data_dir))
        except (OSError, ValueError) as e:
            if "PATH_TO_BE_CONFIGURED" in str(e):  # a zoo pipeline.config, as downloaded
                log.info("class names: data.%s is the TF OD API placeholder path", kind)
            else:
                log.warning("class names: cannot read data.%s (%s)", kind, e)
            continue
        if len(ids) == num_classes:
            return ids, names
        log.warning("class names: data.%s has %d classes but the model %d", kind, len(ids),
                    num_classes)
    if num_classes == len(COCO_CATEGORY_NAMES):
        log.info("class names: COCO's 90 (no readable dataset or label map in the config)")
        return list(range(1, num_classes + 1)), list(COCO_CATEGORY_NAMES)
    if num_classes == len(COCO_CATEGORY_NAMES) + 1:  # torchvision's numbering: class = id
        log.info("class names: COCO's ids 0..90 (no readable dataset or label map in the "
                 "config)")
        return list(range(num_classes)), ["id_0", *COCO_CATEGORY_NAMES]
    log.warning("class names unknown: calling them class_1 .. class_%d", num_classes)
    return list(range(1, num_classes + 1)), [f"class_{k}" for k in range(1, num_classes + 1)]


def keypoint_layout(config: S.Config, names: list[str]):
    """The layout of the model's keypoint tasks over the classes ``names`` (None without
    keypoint tasks, or, with a warning, when a task's class is not among ``names``)."""
    specs = data_build.keypoint_specs(config)
    if not specs:
        return None
    try:
        return resolve_layout(specs, names, "the model's classes")
    except ValueError as e:
        log.warning("keypoints are left out of the predictions: %s", e)
        return None


def labels_of(config: S.Config, data_dir: str | Path) -> Labels:
    """The :class:`Labels` of ``config``'s model (:func:`class_labels`, :func:`keypoint_layout`)."""
    ids, names = class_labels(config, data_dir)
    return Labels(tuple(ids), tuple(names), keypoint_layout(config, names))


def summary_classes(labels: Labels) -> list[dict]:
    """predictions.json's ``classes``: every class's :meth:`Labels.entry`."""
    return [labels.entry(k) for k in range(len(labels.ids))]


__all__ = ["Labels", "class_labels", "keypoint_layout", "labels_of", "summary_classes"]
