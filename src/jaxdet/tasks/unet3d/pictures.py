"""Evaluation pictures of volumes: orthogonal slices of image, label and prediction.

One row per (case, plane): the axial (D), coronal (H) and sagittal (W) slice through the
centre of the case's labelled foreground (of the prediction when the label has none, of the
volume when neither has), and three columns: the image (first channel, grey), the label and
the prediction (classes coloured over the image, background transparent).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np

PLANES = ("axial (D)", "coronal (H)", "sagittal (W)")
# class 1, 2, ... (cycled); background is not drawn
CLASS_COLOURS = np.asarray([[0.95, 0.25, 0.2], [0.2, 0.7, 1.0], [1.0, 0.85, 0.1],
                            [0.4, 0.9, 0.3], [0.8, 0.4, 1.0], [1.0, 0.55, 0.0]])


def slice_centre(label: np.ndarray, prediction: np.ndarray) -> tuple[int, int, int]:
    """(d, h, w) voxel where the three slices cross: the centroid of ``label > 0`` (i32[D, H,
    W]), else of ``prediction > 0``, else the volume's centre."""
    for volume in (label, prediction):
        where = np.argwhere(volume > 0)
        if len(where):
            return tuple(int(v) for v in np.round(where.mean(axis=0)))
    return tuple(s // 2 for s in label.shape)


def orthogonal_slices(volume: np.ndarray, centre: Sequence[int]) -> list[np.ndarray]:
    """The three slices of ``volume`` [D, H, W, ...] through ``centre``: [H, W], [D, W],
    [D, H] (plus any trailing axes)."""
    d, h, w = centre
    return [volume[d], volume[:, h], volume[:, :, w]]


def _overlay(ax, image: np.ndarray, labels: np.ndarray | None) -> None:
    lo, hi = np.percentile(image, (1, 99)) if image.size else (0.0, 1.0)
    ax.imshow(image, cmap="gray", vmin=lo, vmax=hi if hi > lo else lo + 1, origin="lower")
    if labels is not None and labels.max() > 0:
        rgba = np.zeros((*labels.shape, 4))
        for k in range(1, int(labels.max()) + 1):
            rgba[labels == k] = (*CLASS_COLOURS[(k - 1) % len(CLASS_COLOURS)], 0.55)
        ax.imshow(rgba, origin="lower", interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])


def draw_cases(cases: Sequence[tuple[str, np.ndarray, np.ndarray, np.ndarray, dict]],
               path: str | Path, *, class_names: Sequence[str] = ()) -> Path:
    """Write the picture of ``cases`` (:func:`cases_png`) to ``path`` and return it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(cases_png(cases, class_names=class_names))
    return path


def png_pixels(png: bytes) -> np.ndarray:
    """uint8 [H, W, 3] pixels of a PNG (a picture of :func:`cases_png`, for TensorBoard)."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        return np.asarray(image.convert("RGB"), np.uint8)


def cases_png(cases: Sequence[tuple[str, np.ndarray, np.ndarray, np.ndarray, dict]], *,
              class_names: Sequence[str] = ()) -> bytes:
    """The picture of ``cases``, as PNG bytes.

    Args:
      cases: (name, image f32[D, H, W, C], label i32[D, H, W], prediction i32[D, H, W],
        scores {class name: Dice}) per case.
      class_names: names of classes 1, 2, ... for the legend.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = 3 * len(cases)
    fig, axes = plt.subplots(rows, 3, figsize=(7.5, 2.5 * rows), squeeze=False)
    for c, (name, image, label, prediction, scores) in enumerate(cases):
        centre = slice_centre(label, prediction)
        parts = zip(orthogonal_slices(image[..., 0], centre), orthogonal_slices(label, centre),
                    orthogonal_slices(prediction, centre), strict=True)
        for p, (img, lab, pred) in enumerate(parts):
            row = axes[3 * c + p]
            _overlay(row[0], img, None)
            _overlay(row[1], img, lab)
            _overlay(row[2], img, pred)
            row[0].set_ylabel(PLANES[p], fontsize=8)
            if p == 0:
                dice = ", ".join(f"{k} {v:.3f}" for k, v in scores.items())
                row[0].set_title(f"{name}: image", fontsize=8, loc="left")
                row[1].set_title("label", fontsize=8)
                row[2].set_title(f"prediction (Dice {dice})" if dice else "prediction",
                                 fontsize=8)
    if class_names:
        handles = [Patch(color=CLASS_COLOURS[i % len(CLASS_COLOURS)], label=n)
                   for i, n in enumerate(class_names)]
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8)
    fig.tight_layout(rect=(0, 0.03 if class_names else 0, 1, 1))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return buffer.getvalue()


__all__ = ["CLASS_COLOURS", "PLANES", "cases_png", "draw_cases", "orthogonal_slices",
           "png_pixels", "slice_centre"]
