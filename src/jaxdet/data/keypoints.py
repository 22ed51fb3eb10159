"""Keypoint definitions and the checks every source applies to keypoint annotations.

A dataset with keypoints has a :class:`KeypointLayout`: one :class:`KeypointGroup` per class
that carries keypoints (COCO "person" with its 17 joints; a triangle with its 3 vertices), in
the order of the model's keypoint tasks. Every object of every image gets the same ``K =
layout.num_keypoints`` slots, the concatenation of the groups; an object fills only the slots
of its class's group (``group.offset .. group.offset + len(group.names) - 1``), the rest stay
unlabelled. Records and samples then carry, next to ``boxes``:

    "keypoints":           float32 [n, K, 2]  (y, x); PIXELS in records, NORMALIZED in samples
    "keypoint_visibility": int32 [n, K]       COCO's v: 0 not labelled, 1 labelled but
                                              occluded, 2 visible

A keypoint with ``v == 0`` has coordinates (0, 0): it is not used by the loss or the
evaluator. Both keys are absent when the layout is empty (a model without keypoint tasks).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from jaxdet.config.keypoint_specs import COCO_PERSON_KEYPOINTS, COCO_PERSON_SIGMAS, KeypointSpec

KEYPOINT_KEYS = ("keypoints", "keypoint_visibility")



@dataclasses.dataclass(frozen=True)
class KeypointGroup:
    """The keypoints of one class.

    Attributes:
      class_index: the class's contiguous 0-based index.
      class_name: its name (as in the dataset's category list).
      names: the keypoint names in channel order (e.g. COCO's "nose", "left_eye", ...).
      offset: the first of the group's slots in the layout's K.
      skeleton: pairs of 0-based indices into ``names`` drawn as edges.
    """

    class_index: int
    class_name: str
    names: tuple[str, ...]
    offset: int = 0
    skeleton: tuple[tuple[int, int], ...] = ()

    @property
    def slots(self) -> range:
        """The group's indices in the layout's K."""
        return range(self.offset, self.offset + len(self.names))


@dataclasses.dataclass(frozen=True)
class KeypointLayout:
    """Every keypoint group of a dataset, laid end to end (see the module docstring)."""

    groups: tuple[KeypointGroup, ...] = ()

    def __post_init__(self) -> None:
        offset, seen = 0, set()
        for g in self.groups:
            if g.offset != offset:
                raise ValueError(f"keypoint group {g.class_name!r} starts at {g.offset}, "
                                 f"expected {offset} (groups are laid end to end)")
            if g.class_index in seen:
                raise ValueError(f"class {g.class_name!r} has two keypoint groups")
            seen.add(g.class_index)
            offset += len(g.names)

    @classmethod
    def from_groups(cls, groups: Sequence[tuple[int, str, Sequence[str]]]
                    | Sequence[tuple[int, str, Sequence[str], Sequence[tuple[int, int]]]]
                    ) -> KeypointLayout:
        """Lays ``(class_index, class_name, names[, skeleton])`` groups end to end."""
        out, offset = [], 0
        for item in groups:
            index, name, names = item[0], item[1], tuple(item[2])
            skeleton = tuple(tuple(e) for e in item[3]) if len(item) > 3 else ()
            out.append(KeypointGroup(int(index), str(name), names, offset, skeleton))
            offset += len(names)
        return cls(tuple(out))

    @property
    def num_keypoints(self) -> int:
        """K, the slots of every object."""
        return sum(len(g.names) for g in self.groups)

    def __bool__(self) -> bool:
        return bool(self.groups)

    def group_of_class(self, class_index: int) -> KeypointGroup | None:
        """The group of a class, or None for a class without keypoints."""
        for g in self.groups:
            if g.class_index == class_index:
                return g
        return None

    @property
    def edges(self) -> tuple[tuple[int, int], ...]:
        """Every group's skeleton edges as pairs of slots (indices into K)."""
        return tuple((g.offset + a, g.offset + b) for g in self.groups for a, b in g.skeleton)

    def slot_mask(self, classes: np.ndarray) -> np.ndarray:
        """bool [n, K]: for objects of ``classes`` [n], the slots of their class's group."""
        classes = np.asarray(classes).reshape(-1)
        mask = np.zeros((classes.shape[0], self.num_keypoints), bool)
        for g in self.groups:
            mask[np.ix_(classes == g.class_index, np.arange(g.offset, g.offset + len(g.names)))
                 ] = True
        return mask

    def empty(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(keypoints f32 [n, K, 2] zeros, visibility int32 [n, K] zeros)."""
        k = self.num_keypoints
        return np.zeros((n, k, 2), np.float32), np.zeros((n, k), np.int32)


def resolve_layout(specs: Sequence[KeypointSpec], class_names: Sequence[str],
                   where: str) -> KeypointLayout:
    """The layout of ``specs`` in a dataset whose class ``i`` is ``class_names[i]``.

    Raises:
      ValueError naming ``where`` (the dataset) and the class it looked for, when a spec's
      class is not among ``class_names``.
    """
    groups = []
    for spec in specs:
        if spec.class_name not in class_names:
            shown = ", ".join(repr(n) for n in list(class_names)[:12])
            raise ValueError(
                f"{where}: the keypoint task's class {spec.class_name!r} is not a class of the "
                f"dataset (classes: {shown}{', ...' if len(class_names) > 12 else ''}); set "
                "model.keypoint_tasks[].class_name to one of them")
        groups.append((list(class_names).index(spec.class_name), spec.class_name, spec.names,
                       spec.skeleton))
    return KeypointLayout.from_groups(groups)


def check_object_keypoints(yx: np.ndarray, visibility: np.ndarray, height: int, width: int
                           ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Applies the keypoint rules every source shares to one object's keypoints.

    Args:
      yx: f32 [k, 2] PIXEL (y, x) keypoints of one object; visibility: int [k] COCO v.
      height, width: the annotated image's size.
    Returns:
      (yx, visibility, reasons): a keypoint with ``v == 0`` gets coordinates (0, 0) (reason
      ``keypoint_unlabelled_with_coordinates`` when it had others); a labelled keypoint that
      is not finite or lies outside the image gets ``v = 0`` (reason
      ``keypoint_outside_image``); ``v`` outside 0..2 is refused as ``keypoint_bad_visibility``
      (the keypoint is dropped). ``reasons`` lists one entry per repaired keypoint.
    """
    yx = np.array(yx, np.float32).reshape(-1, 2)
    v = np.array(visibility, np.int64).reshape(-1)
    reasons: list[str] = []
    for i in range(len(v)):
        y, x = float(yx[i, 0]), float(yx[i, 1])
        if v[i] not in (0, 1, 2):
            reasons.append("keypoint_bad_visibility")
            v[i] = 0
        elif v[i] == 0:
            if (math.isfinite(y) and y != 0.0) or (math.isfinite(x) and x != 0.0):
                reasons.append("keypoint_unlabelled_with_coordinates")
        elif not (math.isfinite(y) and math.isfinite(x)) or not (
                0.0 <= y <= height and 0.0 <= x <= width):
            reasons.append("keypoint_outside_image")
            v[i] = 0
        if v[i] == 0:
            yx[i] = 0.0
    return yx, v.astype(np.int32), reasons


__all__ = ["COCO_PERSON_KEYPOINTS", "COCO_PERSON_SIGMAS", "KEYPOINT_KEYS", "KeypointGroup",
           "KeypointLayout", "KeypointSpec", "check_object_keypoints", "resolve_layout"]
