"""CenterNet's keypoint estimation as pure, static-shape functions equal to the TF OD API's:
the targets of one keypoint task (``CenterNetKeypointTargetAssigner``: the per-keypoint
heatmap with its blackout mask, the sparse local offsets and the joint regression from the
object center), the three losses as ``CenterNetMetaArch._compute_kp_*`` normalize them, and
the decoding path (per-keypoint candidates from the heatmap, keypoints regressed at object
centers, and the snapping of regressed keypoints to candidates, ``refine_keypoints``).

Conventions. Ground truth of one image is padded to ``N`` objects: ``boxes`` f32[N, 4]
NORMALIZED ``(ymin, xmin, ymax, xmax)``, ``classes`` int32[N] 0-based, ``valid`` bool[N]
(valid and not ignored; TF's per-instance weights), ``keypoints`` f32[N, K_total, 2]
NORMALIZED ``(y, x)`` and ``visibility`` int32[N, K_total] (COCO ``v``). A keypoint counts
when ``v > 0``; ``v == 0`` plays TF's NaN keypoint (weight 0, coordinates taken as 0). A
task keeps the objects of ``class_index`` and the keypoint ``slots`` (TF
``keypoint_indices``, indices into K_total); ``k = len(slots)``. Everything else is in
output-map pixels ``(h, w) = output_size`` (the input divided by the stride) unless said.

The sparse targets are per image with a static row count ``M = N * k * num_neighbors``,
rows ordered (object, keypoint, neighbour) as TF's, so the first ``n * k * num_neighbors``
rows of an image whose real objects come first ARE TF's rows; the rest have weight 0.
``num_neighbors`` is the number of integer (dy, dx) with ``dy^2 + dx^2 <= peak_radius^2``
(1 for radius 0, 13 for radius 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import jax
import jax.numpy as jnp

from jaxdet.tasks.center_net.targets import gaussian_sigma, penalty_reduced_focal_loss, top_k_peaks

BLACKOUT_WEIGHT = 1e-3  # a box blacks out a keypoint channel when its weight is below this
INVALID_CANDIDATE_DISTANCE = 1e5  # TF's distance for padded candidates in refine_keypoints


# --------------------------------------------------------------------------- helpers


def _task_keypoints(classes: jnp.ndarray, valid: jnp.ndarray, keypoints: jnp.ndarray,
                    visibility: jnp.ndarray, class_index: int, slots: Sequence[int],
                    output_size: tuple[int, int]) -> tuple[jnp.ndarray, jnp.ndarray]:
    """TF ``_preprocess_keypoints_and_weights``: the task's keypoints in output pixels
    f32[N, k, 2] (0 where not labelled, as TF's NaN -> 0) and their weights f32[N, k] (1 for
    a labelled keypoint of a valid object of ``class_index``, else 0)."""
    idx = jnp.asarray(tuple(slots), jnp.int32)
    kp = keypoints.astype(jnp.float32)[:, idx, :]
    labelled = (visibility[:, idx] > 0) & jnp.all(jnp.isfinite(kp), axis=-1)
    kp = jnp.where(labelled[..., None], kp, 0.0)
    scale = jnp.asarray([float(output_size[0]), float(output_size[1])], jnp.float32)
    weights = labelled & (classes == class_index)[:, None] & valid.astype(bool)[:, None]
    return kp * scale, weights.astype(jnp.float32)


def _absolute_boxes(boxes: jnp.ndarray, output_size: tuple[int, int]) -> jnp.ndarray:
    """Normalized [N, 4] -> output pixels (TF ``box_list_ops.to_absolute_coordinates``)."""
    h, w = float(output_size[0]), float(output_size[1])
    return boxes.astype(jnp.float32) * jnp.asarray([h, w, h, w], jnp.float32)


def _center_and_size(boxes: jnp.ndarray) -> tuple[jnp.ndarray, ...]:
    """(yc, xc, height, width) of [..., 4] boxes, with TF ``BoxList``'s arithmetic
    (``ymin + height / 2``), so that floors land on the same pixels."""
    ymin, xmin, ymax, xmax = (boxes[..., i] for i in range(4))
    height, width = ymax - ymin, xmax - xmin
    return ymin + height / 2.0, xmin + width / 2.0, height, width


def _scale_boxes(boxes: jnp.ndarray, scale: float) -> jnp.ndarray:
    """TF ``box_list_ops.scale_height_width``: the box grown by ``scale`` about its center."""
    yc, xc, height, width = _center_and_size(boxes)
    half = 0.5 * scale
    return jnp.stack([yc - half * height, xc - half * width,
                      yc + half * height, xc + half * width], axis=-1)


def neighbor_offsets(peak_radius: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The (dy, dx) integer offsets within ``peak_radius`` of a pixel, in TF's order
    (``_get_yx_indices_offset_by_radius``: dy outer, dx inner, ascending)."""
    pairs = [(dy, dx) for dy in range(-peak_radius, peak_radius + 1)
             for dx in range(-peak_radius, peak_radius + 1)
             if dx * dx + dy * dy <= peak_radius * peak_radius]
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


def _surrounding_grids(y: jnp.ndarray, x: jnp.ndarray, output_size: tuple[int, int],
                       peak_radius: int) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """TF ``get_surrounding_grids``: the pixels within ``peak_radius`` of ``floor(y, x)``
    ([P] -> [P, num_neighbors] f32 y, x), those outside the map set to (0, 0) and marked
    invalid (bool)."""
    dy, dx = neighbor_offsets(peak_radius)
    ny = jnp.floor(y)[:, None] + jnp.asarray(dy, jnp.float32)[None, :]
    nx = jnp.floor(x)[:, None] + jnp.asarray(dx, jnp.float32)[None, :]
    inside = (nx >= 0) & (nx < output_size[1]) & (ny >= 0) & (ny < output_size[0])
    return jnp.where(inside, ny, 0.0), jnp.where(inside, nx, 0.0), inside


def _sparse_rows(src_y: jnp.ndarray, src_x: jnp.ndarray, tgt_y: jnp.ndarray,
                 tgt_x: jnp.ndarray, weights: jnp.ndarray, channels: jnp.ndarray,
                 output_size: tuple[int, int], peak_radius: int
                 ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """Rows of the sparse targets for P = N * k points: every pixel within ``peak_radius`` of
    ``floor(src)`` gets the offset ``tgt - pixel`` (TF ``compute_floor_offsets_with_indices``),
    weight ``weights * inside``. Returns indices int32[P * nn, 3] (y, x, channel), offsets
    f32[P * nn, 2], weights f32[P * nn]."""
    ny, nx, inside = _surrounding_grids(src_y, src_x, output_size, peak_radius)
    nn = ny.shape[1]
    offsets = jnp.stack([tgt_y[:, None] - jnp.floor(ny), tgt_x[:, None] - jnp.floor(nx)],
                        axis=-1)
    indices = jnp.stack([jnp.floor(ny).astype(jnp.int32), jnp.floor(nx).astype(jnp.int32),
                         jnp.broadcast_to(channels[:, None], ny.shape)], axis=-1)
    w = inside.astype(jnp.float32) * weights[:, None]
    p = ny.shape[0]
    return indices.reshape(p * nn, 3), offsets.reshape(p * nn, 2), w.reshape(p * nn)


# --------------------------------------------------------------------------- targets


def keypoint_heatmap_targets(boxes: jnp.ndarray, classes: jnp.ndarray, valid: jnp.ndarray,
                             keypoints: jnp.ndarray, visibility: jnp.ndarray, *,
                             class_index: int, slots: Sequence[int],
                             std_dev: Sequence[float] | None = None,
                             output_size: tuple[int, int], min_overlap: float = 0.7
                             ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """The keypoint heatmap of one image and task (TF
    ``CenterNetKeypointTargetAssigner.assign_keypoint_heatmap_targets`` with boxes, dense).

    Keypoint ``j`` of an object splats ``exp(-d^2 / (2 s^2))`` around the pixel
    ``floor(keypoint)`` of channel ``j``, ``s = std_dev[j] * gaussian_sigma(box)`` (the
    object's center-heatmap sigma at ``min_overlap``; TF fixes it at 0.7), weighted by the
    keypoint's weight; objects merge by maximum.

    The valid mask of channel ``j`` is 0 on the pixels ``(y, x)`` with ``ymin <= y < ymax``
    and ``xmin <= x < xmax`` (output pixels) of every box whose keypoint ``j`` has weight
    < 1e-3: boxes of other classes, objects with ``valid`` False (TF's zero-weight
    instances), keypoints not labelled; 1 elsewhere. A padding row with an empty box (all
    zeros, as ``pad_ground_truth`` writes) covers no pixel and so blacks out nothing.

    Args:
      boxes: f32[N, 4] normalized yxyx; classes: int32[N]; valid: bool[N];
        keypoints: f32[N, K_total, 2] normalized (y, x); visibility: int32[N, K_total].
      class_index: the task's class; slots: its k keypoint indices into K_total.
      std_dev: k per-keypoint scales of the Gaussian (TF ``keypoint_std_dev``; default 1).
      output_size: (h, w) of the output map.
    Returns:
      heatmap f32[h, w, k] in [0, 1]; num_instances f32[k] (labelled keypoints of the
      task's valid objects per channel); valid_mask f32[h, w, k] of 0 / 1.
    """
    k = len(slots)
    std = jnp.asarray(tuple(std_dev) if std_dev is not None else (1.0,) * k, jnp.float32)
    if std.shape != (k,):
        raise ValueError(f"std_dev needs {k} values, got {std.shape}")
    kp, weights = _task_keypoints(classes, valid, keypoints, visibility, class_index, slots,
                                  output_size)
    abs_boxes = _absolute_boxes(boxes, output_size)
    _, _, bh, bw = _center_and_size(abs_boxes)
    sigma = std[None, :] * gaussian_sigma(bh, bw, min_overlap)[:, None]  # [N, k]

    ys = jnp.arange(output_size[0], dtype=jnp.float32)[:, None, None, None]
    xs = jnp.arange(output_size[1], dtype=jnp.float32)[None, :, None, None]
    d2 = (xs - jnp.floor(kp[..., 1])) ** 2 + (ys - jnp.floor(kp[..., 0])) ** 2  # [h, w, N, k]
    gauss = jnp.exp(-d2 / (2.0 * sigma * sigma))
    gauss = jnp.where(weights > 0.0, gauss * weights, 0.0)
    heatmap = jnp.maximum(jnp.max(gauss, axis=2, initial=0.0), 0.0)

    scaled = _scale_boxes(abs_boxes, 1.0)
    ys2, xs2 = ys[..., 0], xs[..., 0]  # [h, 1, 1], [1, w, 1]
    in_box = ((ys2 >= scaled[:, 0]) & (ys2 < scaled[:, 2])
              & (xs2 >= scaled[:, 1]) & (xs2 < scaled[:, 3]))  # [h, w, N]
    blackout = weights < BLACKOUT_WEIGHT  # [N, k]
    hidden = jnp.any(in_box[..., None] & blackout[None, None], axis=2)
    valid_mask = 1.0 - hidden.astype(jnp.float32)
    return heatmap, jnp.sum(weights, axis=0), valid_mask


def keypoint_offset_targets(classes: jnp.ndarray, valid: jnp.ndarray, keypoints: jnp.ndarray,
                            visibility: jnp.ndarray, *, class_index: int,
                            slots: Sequence[int], output_size: tuple[int, int],
                            peak_radius: int = 0, per_keypoint_offset: bool = False
                            ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """The keypoints' local offsets of one image and task (TF
    ``assign_keypoints_offset_targets``): every pixel within ``peak_radius`` of
    ``floor(keypoint)`` regresses ``keypoint - pixel``.

    Args: as :func:`keypoint_heatmap_targets` (without boxes); ``per_keypoint_offset``:
      whether the offset head has 2 channels per keypoint (the channel column is then the
      keypoint's index in the task, else 0).
    Returns:
      indices int32[M, 3] (y, x, channel), offsets f32[M, 2] (dy, dx) in output pixels,
      weights f32[M] (1 for a labelled keypoint of a valid object of the task's class whose
      pixel lies in the map, else 0; pixels outside the map are indexed (0, 0)), with
      ``M = N * k * num_neighbors`` in TF's order (object, keypoint, neighbour).
    """
    kp, weights = _task_keypoints(classes, valid, keypoints, visibility, class_index, slots,
                                  output_size)
    n, k = weights.shape
    channel = jnp.tile(jnp.arange(k, dtype=jnp.int32), n)
    if not per_keypoint_offset:
        channel = jnp.zeros_like(channel)
    y, x = kp[..., 0].reshape(-1), kp[..., 1].reshape(-1)
    return _sparse_rows(y, x, y, x, weights.reshape(-1), channel, output_size, peak_radius)


def keypoint_regression_targets(boxes: jnp.ndarray, classes: jnp.ndarray, valid: jnp.ndarray,
                                keypoints: jnp.ndarray, visibility: jnp.ndarray, *,
                                class_index: int, slots: Sequence[int],
                                output_size: tuple[int, int], peak_radius: int = 0
                                ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """The joint regression of one image and task (TF ``assign_joint_regression_targets``):
    every pixel within ``peak_radius`` of the object's center pixel ``floor(box center)``
    regresses ``keypoint - pixel`` for each of its keypoints.

    Args: as :func:`keypoint_heatmap_targets`.
    Returns:
      indices int32[M, 3] (y, x, keypoint channel), offsets f32[M, 2] (dy, dx) in output
      pixels, weights f32[M], ``M = N * k * num_neighbors`` in TF's order (object,
      keypoint, neighbour); weight as :func:`keypoint_offset_targets` (the keypoint's weight,
      0 where the center pixel's neighbour lies outside the map).
    """
    kp, weights = _task_keypoints(classes, valid, keypoints, visibility, class_index, slots,
                                  output_size)
    n, k = weights.shape
    yc, xc, _, _ = _center_and_size(_absolute_boxes(boxes, output_size))
    src_y = jnp.repeat(yc, k)
    src_x = jnp.repeat(xc, k)
    channel = jnp.tile(jnp.arange(k, dtype=jnp.int32), n)
    return _sparse_rows(src_y, src_x, kp[..., 0].reshape(-1), kp[..., 1].reshape(-1),
                        weights.reshape(-1), channel, output_size, peak_radius)


# --------------------------------------------------------------------------- losses


def keypoint_heatmap_loss(logits: jnp.ndarray, heatmap: jnp.ndarray, valid_mask: jnp.ndarray,
                          num_instances: jnp.ndarray, pixel_weights: jnp.ndarray | None = None,
                          *, alpha: float = 2.0, beta: float = 4.0,
                          normalizer: jnp.ndarray | None = None) -> jnp.ndarray:
    """The keypoint heatmap loss of a batch (TF ``_compute_kp_heatmap_loss``, one feature
    output): the penalty-reduced focal loss per pixel and channel, times ``pixel_weights``
    and the valid mask, summed, divided by ``max(sum(num_instances), 1)``.

    Args:
      logits, heatmap, valid_mask: f32[B, h, w, k]; num_instances: [B, k];
      pixel_weights: f32[B, h, w] (or [B, h, w, 1]) 1 inside the true image, or None (all 1).
      normalizer: divide by this instead (e.g. a whole batch's count when this batch is one
        micro-batch of it).
    Returns:
      f32 scalar.
    """
    loss = penalty_reduced_focal_loss(logits, heatmap, alpha=alpha, beta=beta)
    if pixel_weights is not None:
        pw = pixel_weights.astype(jnp.float32)
        loss = loss * (pw if pw.ndim == loss.ndim else pw[..., None])
    loss = loss * valid_mask.astype(jnp.float32)
    total = (jnp.maximum(jnp.sum(num_instances.astype(jnp.float32)), 1.0) if normalizer is None
             else normalizer)
    return jnp.sum(loss) / total


def _sparse_l1_loss(pred: jnp.ndarray, indices: jnp.ndarray, targets: jnp.ndarray,
                    weights: jnp.ndarray, normalizer: jnp.ndarray | None = None) -> jnp.ndarray:
    """``sum(w * |pred[b, y, x, (c)] - t|_1) / max(sum(w), 1)`` (or / ``normalizer``);
    ``pred`` [B, h, w, C] is read as [B, h, w, C / 2, 2] at channel ``c`` when C > 2 (TF
    ``get_batch_predictions_from_indices`` after the reshape of ``_compute_kp_offset_loss`` /
    ``_compute_kp_regression_loss``)."""
    b, h, w, c = pred.shape
    bi = jnp.arange(b)[:, None]
    y, x = indices[..., 0], indices[..., 1]
    if c > 2:
        got = pred.reshape(b, h, w, c // 2, 2)[bi, y, x, indices[..., 2]]
    else:
        got = pred[bi, y, x]
    l1 = jnp.sum(jnp.abs(targets.astype(jnp.float32) - got.astype(jnp.float32)), axis=-1)
    weights = weights.astype(jnp.float32)
    total = jnp.maximum(jnp.sum(weights), 1.0) if normalizer is None else normalizer
    return jnp.sum(weights * l1) / total


def keypoint_offset_loss(pred: jnp.ndarray, indices: jnp.ndarray, offsets: jnp.ndarray,
                         weights: jnp.ndarray, normalizer: jnp.ndarray | None = None
                         ) -> jnp.ndarray:
    """The keypoint offset loss of a batch (TF ``_compute_kp_offset_loss``, one feature output,
    L1): ``sum(w * (|dy' - dy| + |dx' - dx|)) / max(sum(w), 1)`` over the batch's rows.

    Args:
      pred: f32[B, h, w, 2] (shared) or [B, h, w, 2k] (per keypoint: (y, x) of keypoint j at
        channels 2j, 2j + 1); indices int32[B, M, 3], offsets f32[B, M, 2], weights f32[B, M]
        from :func:`keypoint_offset_targets` per image; normalizer: as
        :func:`keypoint_heatmap_loss`'s.
    Returns:
      f32 scalar.
    """
    return _sparse_l1_loss(pred, indices, offsets, weights, normalizer)


def keypoint_regression_loss(pred: jnp.ndarray, indices: jnp.ndarray, offsets: jnp.ndarray,
                             weights: jnp.ndarray, normalizer: jnp.ndarray | None = None
                             ) -> jnp.ndarray:
    """The joint regression loss of a batch (TF ``_compute_kp_regression_loss``, one feature
    output, L1), normalized as :func:`keypoint_offset_loss`.

    Args:
      pred: f32[B, h, w, 2k] ((y, x) of keypoint j at channels 2j, 2j + 1);
        indices int32[B, M, 3], offsets f32[B, M, 2], weights f32[B, M] from
        :func:`keypoint_regression_targets` per image.
    Returns:
      f32 scalar.
    """
    return _sparse_l1_loss(pred, indices, offsets, weights, normalizer)


# --------------------------------------------------------------------------- decoding


def keypoint_candidates(heatmap_probs: jnp.ndarray, offsets: jnp.ndarray, *,
                        max_candidates: int, score_threshold: float = 0.1, kernel: int = 3
                        ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """Per-keypoint candidates (TF ``prediction_tensors_to_keypoint_candidates``, with
    ``top_k_feature_map_locations(per_channel=True)``): the ``max_candidates`` highest local
    maxima (``kernel`` x ``kernel``, see
    :func:`~jaxdet.tasks.center_net.targets.top_k_peaks`) of each
    channel, ties to the lower pixel index, moved by the offset predicted at their pixel.
    When the map has fewer than ``max_candidates`` pixels the rest are score 0 at (0, 0) as
    TF pads them.

    Args:
      heatmap_probs: f32[B, h, w, k] scores (after the sigmoid);
      offsets: f32[B, h, w, 2] (shared) or [B, h, w, 2k] (per keypoint).
    Returns:
      coords f32[B, C, k, 2] (y, x) in output pixels, scores f32[B, C, k] (descending per
      keypoint), num_candidates int32[B, k] (scores >= ``score_threshold``), C =
      ``max_candidates``.
    """
    b, h, w, k = heatmap_probs.shape
    kk = min(max_candidates, h * w)
    per_channel = jax.vmap(lambda m: top_k_peaks(m[..., None], kk, kernel=kernel)[:3],
                           in_axes=3, out_axes=2)
    scores, y, x = per_channel(heatmap_probs)  # [B, kk, k]
    if kk < max_candidates:
        pad = ((0, 0), (0, max_candidates - kk), (0, 0))
        scores, y, x = (jnp.pad(a, pad) for a in (scores, y, x))
    bi = jnp.arange(b)[:, None, None]
    off = offsets[bi, y, x]  # [B, C, k, 2 or 2k]
    if offsets.shape[-1] > 2:
        off = off.reshape(*off.shape[:-1], -1, 2)  # [B, C, k, k, 2]
        off = off[:, :, jnp.arange(k), jnp.arange(k)]  # keypoint j's own pair
    coords = jnp.stack([y.astype(jnp.float32) + off[..., 0],
                        x.astype(jnp.float32) + off[..., 1]], axis=-1)
    num = jnp.sum((scores >= score_threshold).astype(jnp.int32), axis=1)
    return coords, scores, num


def regressed_keypoints_at_centers(regression: jnp.ndarray, y: jnp.ndarray, x: jnp.ndarray
                                   ) -> jnp.ndarray:
    """The keypoints regressed at object center pixels (TF
    ``regressed_keypoints_at_object_centers``): ``pixel + regression[pixel]``.

    Args:
      regression: f32[B, h, w, 2k], (dy, dx) of keypoint j at channels 2j, 2j + 1;
      y, x: int[B, D] center pixels.
    Returns:
      f32[B, D, k, 2] (y, x) in absolute output pixels.
    """
    b, _, _, c = regression.shape
    rel = regression[jnp.arange(b)[:, None], y, x].reshape(b, y.shape[1], c // 2, 2)
    pix = jnp.stack([y, x], axis=-1).astype(jnp.float32)[:, :, None, :]
    return pix + rel


def refine_keypoints(regressed: jnp.ndarray, candidates: jnp.ndarray, scores: jnp.ndarray,
                     num_candidates: jnp.ndarray, boxes: jnp.ndarray | None = None, *,
                     unmatched_keypoint_score: float = 0.1, box_scale: float = 1.2,
                     candidate_search_scale: float = 0.3,
                     ranking_mode: Literal["min_distance", "score_distance_ratio"] = (
                         "min_distance"),
                     score_distance_offset: float = 1e-6, score_threshold: float = 0.1
                     ) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Snaps regressed keypoints to candidates of their type (TF ``refine_keypoints``).

    For each object and keypoint type the candidate is chosen among the first
    ``num_candidates`` (the rest are at distance 1e5): the nearest (``'min_distance'``) or
    the highest ``score / (distance + score_distance_offset)`` (``'score_distance_ratio'``);
    ties to the lower index. The regressed keypoint is kept, with score
    ``unmatched_keypoint_score``, when the chosen candidate scores below
    ``score_threshold`` or, given ``boxes``, lies outside the box grown by ``box_scale``
    about its center, or when the NEAREST candidate (whatever the mode chose) is farther
    than ``candidate_search_scale * max(height, width)`` of that grown box. Without boxes
    only the score decides (TF does not derive boxes from the keypoints there).

    Args:
      regressed: f32[B, D, k, 2] (y, x) output pixels; candidates f32[B, C, k, 2], scores
        f32[B, C, k], num_candidates int[B, k] from :func:`keypoint_candidates`;
      boxes: f32[B, D, 4] yxyx in output pixels, or None.
    Returns:
      keypoints f32[B, D, k, 2] (y, x) output pixels, scores f32[B, D, k].
    """
    b, _, k, _ = regressed.shape
    c = candidates.shape[1]
    diff = regressed[:, :, None] - candidates[:, None]  # [B, D, C, k, 2]
    dist = jnp.sqrt(jnp.sum(diff * diff, axis=-1))  # [B, D, C, k]
    invalid = jnp.arange(c)[None, :, None] >= num_candidates[:, None, :]  # [B, C, k]
    dist = jnp.where(invalid[:, None], INVALID_CANDIDATE_DISTANCE, dist)
    min_dist = jnp.min(dist, axis=2)  # [B, D, k]
    if ranking_mode == "min_distance":
        choice = jnp.argmin(dist, axis=2)
    elif ranking_mode == "score_distance_ratio":
        choice = jnp.argmax(scores[:, None] / (dist + score_distance_offset), axis=2)
    else:
        raise ValueError(f"unsupported ranking_mode {ranking_mode!r}")
    bi = jnp.arange(b)[:, None, None]
    ki = jnp.arange(k)[None, None, :]
    chosen = candidates[bi, choice, ki]  # [B, D, k, 2]
    chosen_scores = scores[bi, choice, ki]  # [B, D, k]

    keep = chosen_scores < score_threshold
    if boxes is not None:
        grown = _scale_boxes(boxes.astype(jnp.float32), box_scale)[:, :, None, :]  # [B,D,1,4]
        ymin, xmin, ymax, xmax = (grown[..., i] for i in range(4))
        radius = jnp.maximum(ymax - ymin, xmax - xmin) * candidate_search_scale
        cy, cx = chosen[..., 0], chosen[..., 1]
        keep = (keep | (cy < ymin) | (cy > ymax) | (cx < xmin) | (cx > xmax)
                | (min_dist > radius))
    refined = jnp.where(keep[..., None], regressed, chosen)
    refined_scores = jnp.where(keep, jnp.float32(unmatched_keypoint_score), chosen_scores)
    return refined, refined_scores


__all__ = [
    "BLACKOUT_WEIGHT", "INVALID_CANDIDATE_DISTANCE", "keypoint_candidates",
    "keypoint_heatmap_loss", "keypoint_heatmap_targets", "keypoint_offset_loss",
    "keypoint_offset_targets", "keypoint_regression_loss", "keypoint_regression_targets",
    "neighbor_offsets", "refine_keypoints", "regressed_keypoints_at_centers",
]
