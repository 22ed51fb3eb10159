"""CenterNet keypoint tasks: targets, losses and decoding of one task, on a whole batch.

A task owns ``slots`` of the batch's K keypoint slots (``data.keypoints``: groups laid end to
end, one per class with keypoints). Objects of other classes have their slots unlabelled
(v = 0), so they take no keypoint targets and, as in the TF OD API, black out the task's
heatmap loss inside their boxes; that is why no class index is needed here. The pure
functions are in ``tasks.center_net.keypoint_ops``.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from jaxdet.tasks.center_net import keypoint_ops as ck


@dataclass(frozen=True)
class KeypointTask:
    """One keypoint task (``model.keypoint_tasks[i]`` with its slots resolved).

    Attributes:
      name: the task's name; slots: its indices in the batch's K keypoint slots.
      std_dev: the per-keypoint Gaussian scale (TF ``keypoint_std_dev``).
      class_name: the class whose keypoints these are; oks_sigmas: their OKS sigmas (eval).
      The rest as ``config.schema.CenterNetKeypointTaskConfig``.
    """

    name: str
    slots: tuple[int, ...]
    std_dev: tuple[float, ...]
    class_name: str = ""
    oks_sigmas: tuple[float, ...] = ()
    heatmap_weight: float = 1.0
    offset_weight: float = 1.0
    regression_weight: float = 1.0
    offset_peak_radius: int = 0
    per_keypoint_offset: bool = False
    candidate_score_threshold: float = 0.1
    num_candidates: int = 100
    peak_kernel: int = 3
    unmatched_keypoint_score: float = 0.1
    box_scale: float = 1.2
    candidate_search_scale: float = 0.3
    candidate_ranking_mode: str = "min_distance"
    score_distance_offset: float = 1e-6

    @property
    def num_keypoints(self) -> int:
        return len(self.slots)

    # ----------------------------------------------------------------- targets and loss

    def targets(self, batch: dict, output_size: tuple[int, int]) -> dict:
        """The task's targets of a batch (leaves [B, ...]): ``heatmap`` [B, h, w, k],
        ``num_instances`` [B, k], ``valid_mask`` [B, h, w, k]; ``offset_*`` and
        ``regression_*`` indices [B, M, 3] (y, x, channel), offsets [B, M, 2], weights [B, M]."""
        valid = batch["valid"] & ~batch["ignore"]
        same = jnp.zeros_like(batch["classes"])  # the slots already select the class

        def one(boxes, classes, keep, keypoints, visibility):
            common = dict(class_index=0, slots=self.slots, output_size=output_size)
            heat, num, mask = ck.keypoint_heatmap_targets(
                boxes, classes, keep, keypoints, visibility, std_dev=self.std_dev, **common)
            o_idx, o_off, o_w = ck.keypoint_offset_targets(
                classes, keep, keypoints, visibility, peak_radius=self.offset_peak_radius,
                per_keypoint_offset=self.per_keypoint_offset, **common)
            r_idx, r_off, r_w = ck.keypoint_regression_targets(
                boxes, classes, keep, keypoints, visibility,
                peak_radius=self.offset_peak_radius, **common)
            return {"heatmap": heat, "num_instances": num, "valid_mask": mask,
                    "offset_indices": o_idx, "offset_targets": o_off, "offset_weights": o_w,
                    "regression_indices": r_idx, "regression_targets": r_off,
                    "regression_weights": r_w}

        return jax.vmap(one)(batch["boxes"], same, valid, batch["keypoints"],
                             batch["keypoint_visibility"])

    @staticmethod
    def normalizers(targets: dict) -> dict:
        """What each of the task's losses is divided by (TF's): the number of labelled
        keypoints (heatmap), and the summed weights of the offset and regression rows, each at
        least 1."""
        return {"heatmap": jnp.maximum(jnp.sum(targets["num_instances"]), 1.0),
                "offset": jnp.maximum(jnp.sum(targets["offset_weights"]), 1.0),
                "regression": jnp.maximum(jnp.sum(targets["regression_weights"]), 1.0)}

    def losses(self, outputs: dict, targets: dict, normalizers: dict, *, alpha: float,
               beta: float) -> dict:
        """The task's weighted heatmap, offset and regression losses (f32 scalars) from its
        head ``outputs`` (``tasks.center_net.model.KeypointHeads``)."""
        heat = ck.keypoint_heatmap_loss(
            outputs["heatmap"], targets["heatmap"], targets["valid_mask"],
            targets["num_instances"], targets.get("pixels"), alpha=alpha, beta=beta,
            normalizer=normalizers["heatmap"])
        offset = ck.keypoint_offset_loss(
            outputs["offset"], targets["offset_indices"], targets["offset_targets"],
            targets["offset_weights"], normalizer=normalizers["offset"])
        regression = ck.keypoint_regression_loss(
            outputs["regression"], targets["regression_indices"],
            targets["regression_targets"], targets["regression_weights"],
            normalizer=normalizers["regression"])
        return {"heatmap": self.heatmap_weight * heat, "offset": self.offset_weight * offset,
                "regression": self.regression_weight * regression}

    # ----------------------------------------------------------------- decoding

    def decode(self, outputs: dict, y: jax.Array, x: jax.Array, boxes: jax.Array
               ) -> tuple[jax.Array, jax.Array]:
        """TF's grouping of the task's keypoints to every detected object.

        Args:
          outputs: the task's head outputs (logits / offsets / regressions, [B, h, w, ...]).
          y, x: [B, D] the detections' center pixels; boxes: [B, D, 4] their boxes, output px.
        Returns:
          keypoints [B, D, k, 2] (y, x) in output pixels and scores [B, D, k].
        """
        candidates, scores, count = ck.keypoint_candidates(
            jax.nn.sigmoid(outputs["heatmap"]), outputs["offset"],
            max_candidates=self.num_candidates, score_threshold=self.candidate_score_threshold,
            kernel=self.peak_kernel)
        regressed = ck.regressed_keypoints_at_centers(outputs["regression"], y, x)
        return ck.refine_keypoints(
            regressed, candidates, scores, count, boxes,
            unmatched_keypoint_score=self.unmatched_keypoint_score, box_scale=self.box_scale,
            candidate_search_scale=self.candidate_search_scale,
            ranking_mode=self.candidate_ranking_mode,
            score_distance_offset=self.score_distance_offset,
            score_threshold=self.candidate_score_threshold)


__all__ = ["KeypointTask"]
