"""Keypoints as a config names them: :class:`KeypointSpec` (a class's keypoint names and
skeleton, before the class is found in a dataset) and COCO's person keypoints. The data layer
resolves specs against a dataset's classes (``data.keypoints``)."""

from __future__ import annotations

import dataclasses

# COCO's person keypoints and the per-keypoint OKS sigmas of its evaluation (pycocotools).
COCO_PERSON_KEYPOINTS = (
    "nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder",
    "right_shoulder", "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip",
    "right_hip", "left_knee", "right_knee", "left_ankle", "right_ankle",
)
COCO_PERSON_SIGMAS = (
    0.026, 0.025, 0.025, 0.035, 0.035, 0.079, 0.079, 0.072, 0.072, 0.062, 0.062, 0.107,
    0.107, 0.087, 0.087, 0.089, 0.089,
)


@dataclasses.dataclass(frozen=True)
class KeypointSpec:
    """A keypoint group as configured (``model.keypoint_tasks``), before its class name is
    resolved against a dataset's classes: ``class_name``, keypoint ``names``, ``skeleton``."""

    class_name: str
    names: tuple[str, ...]
    skeleton: tuple[tuple[int, int], ...] = ()


__all__ = ["COCO_PERSON_KEYPOINTS", "COCO_PERSON_SIGMAS", "KeypointSpec"]
