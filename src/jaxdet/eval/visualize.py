"""Drawing detections and image grids with Pillow (no matplotlib).

Conventions: boxes are PIXEL (ymin, xmin, ymax, xmax) in the drawn image's own pixel grid;
classes are contiguous 0-based indices into ``class_names``.

    image = draw_detections(pixels, boxes, classes, scores, ["circle", "square"])
    grid = image_grid([[gt_image, pred_image], ...], titles=["image 1", ...], cell_size=256)
"""

from __future__ import annotations

import colorsys
import functools
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

_GOLDEN = 0.618033988749895
WHITE = (255, 255, 255)
MASK_ALPHA = 0.45  # weight of the class colour where an instance mask is drawn


def class_color(class_index: int, *, color_seed: int = 0) -> tuple[int, int, int]:
    """A bright, saturated RGB colour for a class: stable across calls and runs.

    Hues step by the golden ratio, so neighbouring class indices get far-apart hues.
    """
    hue = (0.13 + _GOLDEN * (int(class_index) + 7 * int(color_seed))) % 1.0
    r, g, b = colorsys.hsv_to_rgb(hue, 0.85, 0.95)
    return int(round(r * 255)), int(round(g * 255)), int(round(b * 255))


def _text_color(fill: tuple[int, int, int]) -> tuple[int, int, int]:
    """Black or white, whichever reads better on ``fill`` (ITU-R BT.601 luma)."""
    luma = 0.299 * fill[0] + 0.587 * fill[1] + 0.114 * fill[2]
    return (0, 0, 0) if luma >= 140 else WHITE


def line_width(height: int, width: int) -> int:
    """Box outline width in pixels: 1 for thumbnails, growing with the shorter side."""
    return max(1, int(round(min(height, width) / 200)))


@functools.lru_cache(maxsize=16)
def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError, ImportError):  # Pillow < 10.1 or no FreeType: bitmap font
        return ImageFont.load_default()


def font_size(height: int, width: int) -> int:
    """Label font size in pixels for an image of this size (10 px minimum)."""
    return max(10, int(round(min(height, width) / 40)))


def tag_rect(
    text_size: tuple[int, int],
    box_xyxy: tuple[float, float, float, float],
    image_size: tuple[int, int],
) -> tuple[int, int, int, int]:
    """Where a label tag of ``text_size`` (w, h, padding included) goes for a box.

    Above the box's top-left corner when there is room, else just inside the top edge; shifted
    left/up so that it stays inside the ``image_size`` (width, height) image (a tag larger
    than the image is pinned to the top-left corner).

    Returns:
      (x0, y0, x1, y1) integer pixel rectangle, x1/y1 exclusive.
    """
    tw, th = text_size
    width, height = image_size
    x0 = int(round(box_xyxy[0]))
    y_top = int(round(box_xyxy[1]))
    y0 = y_top - th if y_top - th >= 0 else y_top
    x0 = max(0, min(x0, width - tw))
    y0 = max(0, min(y0, height - th))
    return x0, y0, x0 + tw, y0 + th


def _clamped(x0: float, y0: float, tw: int, th: int, image_size: tuple[int, int]):
    width, height = image_size
    x0 = max(0, min(int(round(x0)), width - tw))
    y0 = max(0, min(int(round(y0)), height - th))
    return x0, y0, x0 + tw, y0 + th


def tag_candidates(
    text_size: tuple[int, int],
    box_xyxy: tuple[float, float, float, float],
    image_size: tuple[int, int],
) -> list[tuple[int, int, int, int]]:
    """Places a label tag may go for a box, in order of preference, each inside the image:
    :func:`tag_rect`'s (above the top-left corner), inside the top-left corner, below and
    inside the bottom-left corner, then the same at the right edge."""
    tw, th = text_size
    x0, y0, x1, y1 = box_xyxy
    right = x1 + 1 - tw
    spots = [(x0, y0), (x0, y1 + 1), (x0, y1 + 1 - th), (right, y0 - th), (right, y0),
             (right, y1 + 1), (right, y1 + 1 - th)]
    out = [tag_rect(text_size, box_xyxy, image_size)]
    for x, y in spots:
        rect = _clamped(x, y, tw, th, image_size)
        if rect not in out:
            out.append(rect)
    return out


def _overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> int:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return max(w, 0) * max(h, 0)


def place_tags(
    text_sizes: Sequence[tuple[int, int]],
    boxes_xyxy: Sequence[tuple[float, float, float, float]],
    image_size: tuple[int, int],
) -> list[tuple[int, int, int, int]]:
    """Greedy label layout: tag i (in the given order, most important first) takes its first
    :func:`tag_candidates` place that overlaps no tag placed before it, or else the one that
    overlaps them least. Returns one (x0, y0, x1, y1) rectangle per tag, x1/y1 exclusive."""
    placed: list[tuple[int, int, int, int]] = []
    for size, box in zip(text_sizes, boxes_xyxy, strict=True):
        best, best_cost = None, None
        for rect in tag_candidates(size, box, image_size):
            cost = sum(_overlap(rect, other) for other in placed)
            if best_cost is None or cost < best_cost:
                best, best_cost = rect, cost
            if cost == 0:
                break
        placed.append(best)
    return placed


def _draw_keypoints(draw: ImageDraw.ImageDraw, keypoints: np.ndarray, mask, edges,
                    colors: list, order: list[int], lw: int) -> None:
    """Skeleton lines in the box's colour, then each keypoint as a dot with a white rim."""
    n, k = keypoints.shape[:2]
    mask = np.ones((n, k), bool) if mask is None else np.asarray(mask, bool).reshape(n, k)
    mask = mask & np.all(np.isfinite(keypoints), axis=-1)
    radius = max(2, lw + 1)
    for i, color in zip(order, colors, strict=True):
        points = keypoints[i]
        for a, b in edges:
            if mask[i, a] and mask[i, b]:
                draw.line([(points[a, 1], points[a, 0]), (points[b, 1], points[b, 0])],
                          fill=color, width=lw)
        for j in np.nonzero(mask[i])[0]:
            y, x = points[j]
            draw.ellipse([x - radius, y - radius, x + radius, y + radius], fill=color,
                         outline=(255, 255, 255))


def blend_masks(pixels: np.ndarray, masks: np.ndarray, colors: Sequence[tuple[int, int, int]],
                alpha: float = MASK_ALPHA) -> np.ndarray:
    """Instance masks painted translucently over an image, in the given order (later on top).

    Args:
      pixels: uint8 [H, W, 3].
      masks: [N, H, W] binary (nonzero: in the mask).
      colors: N RGB colours; alpha: the colour's weight, in [0, 1].
    Returns:
      uint8 [H, W, 3]: ``(1 - alpha) * pixel + alpha * colour`` where a mask covers a pixel
      (applied mask after mask), rounded; other pixels unchanged.
    """
    masks = np.asarray(masks)
    if masks.ndim != 3 or masks.shape[1:] != pixels.shape[:2] or len(colors) != len(masks):
        raise ValueError(f"masks must be [N, {pixels.shape[0]}, {pixels.shape[1]}] (the image's "
                         f"size) with one colour each; got shape {masks.shape} and "
                         f"{len(colors)} colours")
    out = pixels.astype(np.float64)
    for mask, color in zip(masks, colors, strict=True):
        inside = mask != 0
        out[inside] = (1.0 - alpha) * out[inside] + alpha * np.asarray(color, np.float64)
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


def resize_masks(masks: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Masks ``[N, h, w]`` resampled to ``size = (H, W)``: ``[N, H, W]``, same dtype; each
    output pixel takes the input pixel under its center (nearest neighbour, half-pixel
    convention), so binary masks stay binary (to draw them on a scaled image)."""
    masks = np.asarray(masks)
    height, width = (int(v) for v in size)
    rows = np.minimum(((np.arange(height) + 0.5) * masks.shape[1] / height).astype(np.int64),
                      masks.shape[1] - 1)
    cols = np.minimum(((np.arange(width) + 0.5) * masks.shape[2] / width).astype(np.int64),
                      masks.shape[2] - 1)
    return masks[:, rows][:, :, cols]


def _label(name: str, score: float | None) -> str:
    return name if score is None else f"{name} {score:.2f}"


def draw_detections(
    image: np.ndarray,
    boxes: np.ndarray,
    classes: np.ndarray,
    scores: np.ndarray | None,
    class_names: Sequence[str],
    *,
    color_seed: int = 0,
    keypoints: np.ndarray | None = None,
    keypoint_mask: np.ndarray | None = None,
    edges: Sequence[tuple[int, int]] = (),
    masks: np.ndarray | None = None,
    mask_alpha: float = MASK_ALPHA,
) -> Image.Image:
    """Draws boxes with labelled tags on a copy of ``image``, and optionally keypoints and
    instance masks.

    Boxes are drawn lowest score first, so the best ones end up on top, and every tag after
    every box outline. Tags stay inside the image and avoid each other where a free place
    exists (:func:`place_tags`, the best-scoring boxes choose first).

    Args:
      image: uint8 [H, W, 3] (a [H, W] grayscale array is accepted too).
      boxes: [N, 4] PIXEL (ymin, xmin, ymax, xmax).
      classes: [N] int, 0-based index into ``class_names`` (an index outside it is drawn as
        ``class <k>``).
      scores: [N] or None. None draws labels without scores (ground truth).
      class_names: display name per class index.
      color_seed: shifts the colour of every class (same seed, same colours).
      keypoints: [N, K, 2] PIXEL (y, x) per box, or None; keypoint_mask: [N, K] bool, the
        keypoints to draw (default all); edges: (slot, slot) pairs joined by a line where both
        ends are drawn (the skeleton, ``data.keypoints.KeypointLayout.edges``).
      masks: [N, H, W] binary instance masks (nonzero: in the mask) in the image's pixels, one
        per box, or None: each is blended into the image in its class colour with weight
        ``mask_alpha`` (:func:`blend_masks`; lowest score first), under the outlines and tags.
    Returns:
      An RGB ``PIL.Image`` of size W x H; unchanged pixels where nothing is drawn.
    """
    pixels = np.asarray(image)
    if pixels.ndim == 2:
        pixels = np.repeat(pixels[:, :, None], 3, axis=2)
    if pixels.ndim != 3 or pixels.shape[2] != 3:
        raise ValueError(f"image must be [H, W, 3], got shape {pixels.shape}")
    out = Image.fromarray(np.ascontiguousarray(pixels.astype(np.uint8)), "RGB")
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    classes = np.asarray(classes).reshape(-1).astype(np.int64)
    if classes.shape[0] != boxes.shape[0]:
        raise ValueError(f"{boxes.shape[0]} boxes but {classes.shape[0]} classes")
    if scores is not None:
        scores = np.asarray(scores, np.float64).reshape(-1)
        if scores.shape[0] != boxes.shape[0]:
            raise ValueError(f"{boxes.shape[0]} boxes but {scores.shape[0]} scores")
    if masks is not None:
        masks = np.asarray(masks)
        if masks.shape[:1] != boxes.shape[:1]:
            raise ValueError(f"{boxes.shape[0]} boxes but masks of shape {masks.shape}")
    if boxes.shape[0] == 0:
        return out

    height, width = pixels.shape[:2]
    if masks is not None:
        below_first = (np.argsort(scores, kind="stable") if scores is not None
                       else np.arange(boxes.shape[0]))
        colors = [class_color(int(classes[i]), color_seed=color_seed) for i in below_first]
        out = Image.fromarray(blend_masks(np.asarray(out), masks[below_first], colors,
                                          mask_alpha), "RGB")
    lw = line_width(height, width)
    font = _font(font_size(height, width))
    pad = max(1, lw)
    draw = ImageDraw.Draw(out)
    # Lowest score first, so the best boxes and labels are drawn on top; labels are laid out
    # best first, so the best ones get their preferred places.
    order = [i for i in (np.argsort(scores, kind="stable") if scores is not None
                         else range(boxes.shape[0])) if np.all(np.isfinite(boxes[i]))]
    rects, tags = [], []
    for i in order:
        ymin, xmin, ymax, xmax = boxes[i]
        k = int(classes[i])
        name = class_names[k] if 0 <= k < len(class_names) else f"class {k}"
        # Pillow's rectangle includes both corners: the last pixel row/column is x1 - 1.
        x0 = min(max(xmin, 0.0), width - 1)
        y0 = min(max(ymin, 0.0), height - 1)
        x1 = min(max(xmax - 1, x0), width - 1)
        y1 = min(max(ymax - 1, y0), height - 1)
        text = _label(name, None if scores is None else float(scores[i]))
        left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
        rects.append((x0, y0, x1, y1))
        tags.append((text, class_color(k, color_seed=color_seed), (left, top),
                     (right - left + 2 * pad, bottom - top + 2 * pad)))
    places = place_tags([t[3] for t in tags][::-1], rects[::-1], (width, height))[::-1]
    for rect, (_, color, _, _) in zip(rects, tags, strict=True):
        draw.rectangle(list(rect), outline=color, width=lw)
    if keypoints is not None:
        _draw_keypoints(draw, np.asarray(keypoints, np.float64), keypoint_mask, edges,
                        [tags[j][1] for j in range(len(order))], order, lw)
    for (tx0, ty0, tx1, ty1), (text, color, (left, top), _) in zip(places, tags, strict=True):
        draw.rectangle([tx0, ty0, tx1 - 1, ty1 - 1], fill=color)
        draw.text((tx0 + pad - left, ty0 + pad - top), text, fill=_text_color(color), font=font)
    return out


def _fit(image: Image.Image, cell_w: int, cell_h: int) -> Image.Image:
    """``image`` scaled (aspect kept) to fit cell_w x cell_h, centred on a white cell."""
    image = image.convert("RGB")
    scale = min(cell_w / image.width, cell_h / image.height)
    new_w = max(1, min(cell_w, int(round(image.width * scale))))
    new_h = max(1, min(cell_h, int(round(image.height * scale))))
    cell = Image.new("RGB", (cell_w, cell_h), WHITE)
    resample = Image.Resampling.LANCZOS if scale < 1 else Image.Resampling.NEAREST
    cell.paste(image.resize((new_w, new_h), resample),
               ((cell_w - new_w) // 2, (cell_h - new_h) // 2))
    return cell


def title_height(cell_size: int | tuple[int, int]) -> int:
    """Height in pixels of the title band above each grid row."""
    cell_w, cell_h = (cell_size, cell_size) if isinstance(cell_size, int) else cell_size
    return font_size(cell_h, cell_w) + 8


def image_grid(
    rows: Sequence[Sequence[Image.Image]],
    titles: Sequence[str] | None = None,
    cell_size: int | tuple[int, int] = 256,
    *,
    gap: int = 4,
) -> Image.Image:
    """A white sheet with one row per entry of ``rows``, each image fitted into a fixed cell.

    Args:
      rows: images per row (rows may have different lengths; missing cells stay white).
      titles: one title per row, drawn in a band of :func:`title_height` above the row, or
        None for no bands.
      cell_size: cell (width, height) in pixels, or one int for square cells. Images are
        scaled with their aspect ratio kept and centred, padded with white.
      gap: white pixels between and around cells.
    Returns:
      RGB image of width ``cols * cell_w + (cols + 1) * gap`` and height
      ``len(rows) * (band + cell_h) + (len(rows) + 1) * gap`` with ``band`` = 0 without titles.
    """
    cell_w, cell_h = (cell_size, cell_size) if isinstance(cell_size, int) else cell_size
    if cell_w < 1 or cell_h < 1:
        raise ValueError(f"cell_size must be positive, got {cell_size}")
    if titles is not None and len(titles) != len(rows):
        raise ValueError(f"{len(rows)} rows but {len(titles)} titles")
    cols = max((len(r) for r in rows), default=0)
    band = title_height((cell_w, cell_h)) if titles is not None else 0
    sheet_w = cols * cell_w + (cols + 1) * gap
    sheet_h = len(rows) * (band + cell_h) + (len(rows) + 1) * gap
    sheet = Image.new("RGB", (max(1, sheet_w), max(1, sheet_h)), WHITE)
    draw = ImageDraw.Draw(sheet)
    font = _font(max(10, band - 8)) if band else None
    for r, row in enumerate(rows):
        top = gap + r * (band + cell_h + gap)
        if titles is not None:
            draw.text((gap, top + 2), str(titles[r]), fill=(0, 0, 0), font=font)
        for c, image in enumerate(row):
            sheet.paste(_fit(image, cell_w, cell_h), (gap + c * (cell_w + gap), top + band))
    return sheet


__all__ = ["MASK_ALPHA", "blend_masks", "class_color", "draw_detections", "font_size",
           "image_grid", "line_width", "place_tags", "resize_masks", "tag_candidates",
           "tag_rect", "title_height"]
