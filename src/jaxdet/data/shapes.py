"""Synthetic "shapes" detection data set, written as images + COCO JSON.

Each image has a textured background (smooth noise, gradient, stripes or checkers in two
nearby random colours, plus pixel noise) and up to ``max_objects`` filled shapes in colours
that contrast with the background and with the shapes they overlap. Sizes are log-uniform
between ``min_size_frac`` and ``max_size_frac`` of the shorter image side, so there are tiny
and large objects. Later shapes are drawn on top of earlier ones; a candidate shape that would
leave an earlier one less than ``min_visible_frac`` visible is not drawn at all, so every
visible shape is annotated. Each annotation is the tight pixel box of the full shape; with
``masks=True`` also its exact instance mask: the pixels it covers in the image (the shape as
drawn, less what later shapes cover), as a COCO RLE ``segmentation``.

Everything is derived from ``seed`` (one generator per image), so the same call writes the same
bytes. A ``params.json`` stamp lets a second call with the same parameters return at once.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from jaxdet.data.masks import coco_rle

SHAPE_NAMES = ("circle", "square", "triangle", "star", "ellipse", "cross", "hexagon", "ring")
GENERATOR_VERSION = 1
_MIN_SHAPE_PX = 4.0
_MIN_CONTRAST = 110.0  # RGB distance between a shape and the background colours
_MIN_OBJECT_CONTRAST = 80.0  # ... and the shapes it overlaps
_TRIES_PER_OBJECT = 8

SizeSpec = int | tuple[int, int] | tuple[tuple[int, int], tuple[int, int]]


def _size_sampler(image_size: SizeSpec):
    """Returns f(rng) -> (H, W) for an int, an (H, W) pair or ((hmin, hmax), (wmin, wmax))."""
    if isinstance(image_size, numbers.Integral):
        return lambda rng: (int(image_size), int(image_size))
    h, w = image_size
    if isinstance(h, numbers.Integral) and isinstance(w, numbers.Integral):
        return lambda rng: (int(h), int(w))
    (h0, h1), (w0, w1) = (int(v) for v in h), (int(v) for v in w)
    if not (0 < h0 <= h1 and 0 < w0 <= w1):
        raise ValueError(f"image_size ranges must be positive (min, max) pairs, got {image_size}")
    return lambda rng: (int(rng.integers(h0, h1 + 1)), int(rng.integers(w0, w1 + 1)))


def _background(rng: np.random.Generator, height: int, width: int):
    base = rng.uniform(30, 225, 3)
    spread = rng.uniform(15, 45)
    c1 = np.clip(base + rng.normal(0, spread, 3), 0, 255)
    c2 = np.clip(base + rng.normal(0, spread, 3), 0, 255)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    kind = int(rng.integers(4))
    angle = rng.uniform(0, math.pi)
    proj = yy * math.sin(angle) + xx * math.cos(angle)
    if kind == 0:  # smooth noise: a coarse random grid upsampled
        grid = rng.random((int(rng.integers(2, 9)), int(rng.integers(2, 9)))).astype(np.float32)
        t = np.asarray(Image.fromarray(grid, "F").resize((width, height), Image.BILINEAR))
    elif kind == 1:  # linear gradient
        t = (proj - proj.min()) / max(float(np.ptp(proj)), 1e-6)
    elif kind == 2:  # stripes
        period = rng.uniform(4, max(6.0, min(height, width) / 3))
        t = (np.sin(2 * math.pi * proj / period) > 0).astype(np.float32)
    else:  # checkers
        cell = int(rng.integers(3, max(4, min(height, width) // 4)))
        t = ((yy // cell + xx // cell) % 2).astype(np.float32)
    image = c1 + t[..., None] * (c2 - c1)
    return image.astype(np.float32), (c1, c2)


def _polygon(center, radius, angle, n, inner=None):
    cx, cy = center
    points = []
    count = n * 2 if inner is not None else n
    for k in range(count):
        r = radius if inner is None or k % 2 == 0 else radius * inner
        a = angle + 2 * math.pi * k / count
        points.append((cx + r * math.cos(a), cy + r * math.sin(a)))
    return points


# Keypoints of the shapes that have corners (``generate_shapes(keypoints=True)``): names in
# slot order, COCO skeleton (1-based), and the flip permutation of the slots.
SHAPE_KEYPOINTS = {
    "square": (("top_left", "top_right", "bottom_right", "bottom_left"),
               ((1, 2), (2, 3), (3, 4), (4, 1)), (1, 0, 3, 2)),
    "triangle": (("top", "next", "last"), ((1, 2), (2, 3), (3, 1)), (0, 2, 1)),
}


def _ordered_corners(name: str, corners: list[tuple[float, float]], center
                     ) -> list[tuple[float, float]]:
    """A shape's (x, y) corners in its keypoint slot order (see :data:`SHAPE_KEYPOINTS`):
    clockwise on the screen, starting at the top-left corner (squares) or at the topmost
    vertex (triangles)."""
    cx, cy = center
    clockwise = sorted(corners, key=lambda p: math.atan2(p[1] - cy, p[0] - cx))
    if name == "square":  # the corner nearest the top-left diagonal first
        start = min(range(4), key=lambda i: abs(math.atan2(clockwise[i][1] - cy,
                                                           clockwise[i][0] - cx)
                                                + 3 * math.pi / 4))
    else:
        start = min(range(len(clockwise)), key=lambda i: clockwise[i][1])
    return clockwise[start:] + clockwise[:start]


def _draw_shape(draw: ImageDraw.ImageDraw, name: str, center, r: float, rng
                ) -> list[tuple[float, float]]:
    """Draws one shape (255 on 0) and returns its (x, y) corners in keypoint slot order (empty
    for shapes without keypoints)."""
    cx, cy = center
    theta = rng.uniform(0, 2 * math.pi)
    if name == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=255)
    elif name == "ring":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=255)
        ri = r * rng.uniform(0.45, 0.6)
        draw.ellipse([cx - ri, cy - ri, cx + ri, cy + ri], fill=0)
    elif name == "square":
        corners = _polygon(center, r, math.pi / 4 + rng.uniform(-0.2, 0.2), 4)
        draw.polygon(corners, fill=255)
        return _ordered_corners(name, corners, center)
    elif name == "triangle":
        corners = _polygon(center, r, theta, 3)
        draw.polygon(corners, fill=255)
        return _ordered_corners(name, corners, center)
    elif name == "star":
        draw.polygon(_polygon(center, r, theta, 5, inner=0.45), fill=255)
    elif name == "hexagon":
        draw.polygon(_polygon(center, r, theta, 6), fill=255)
    elif name == "ellipse":
        b = r * rng.uniform(0.35, 0.6)
        ts = np.linspace(0, 2 * math.pi, 48, endpoint=False)
        ex, ey = r * np.cos(ts), b * np.sin(ts)
        c, s = math.cos(theta), math.sin(theta)
        draw.polygon(list(zip(cx + ex * c - ey * s, cy + ex * s + ey * c, strict=True)), fill=255)
    elif name == "cross":
        a = r / 3.0
        arm = [(-a, -r), (a, -r), (a, -a), (r, -a), (r, a), (a, a), (a, r), (-a, r),
               (-a, a), (-r, a), (-r, -a), (-a, -a)]
        t = rng.uniform(0, math.pi / 2)
        c, s = math.cos(t), math.sin(t)
        draw.polygon([(cx + x * c - y * s, cy + x * s + y * c) for x, y in arm], fill=255)
    else:  # pragma: no cover - guarded by the class list
        raise ValueError(name)
    return []


def _pick_colour(rng, avoid: list[np.ndarray], min_dists: list[float]) -> np.ndarray | None:
    best, best_score = None, -1e9
    for _ in range(24):
        colour = rng.uniform(0, 255, 3)
        score = min((np.linalg.norm(colour - a) - m for a, m in zip(avoid, min_dists,
                                                                    strict=True)), default=0)
        if score >= 0:
            return colour
        if score > best_score:
            best, best_score = colour, score
    return best if best_score > -40 else None


def render_shapes_image(
    rng: np.random.Generator,
    height: int,
    width: int,
    num_classes: int,
    *,
    min_objects: int = 1,
    max_objects: int = 6,
    min_size_frac: float = 0.05,
    max_size_frac: float = 0.6,
    min_visible_frac: float = 0.3,
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Renders one image; returns (uint8 [H, W, 3], objects with class, box xyxy, area, the
    (x, y) corners of squares and triangles, and ``mask``: bool [H, W], the pixels the object
    covers in the image, i.e. its shape less what later shapes cover)."""
    image, (c1, c2) = _background(rng, height, width)
    owner = np.full((height, width), -1, np.int16)
    objects: list[dict[str, Any]] = []
    visible: list[int] = []
    short = min(height, width)
    lo = max(_MIN_SHAPE_PX, min_size_frac * short)
    hi = max(lo, max_size_frac * short)
    for _ in range(int(rng.integers(min_objects, max_objects + 1))):
        for _try in range(_TRIES_PER_OBJECT):
            cls = int(rng.integers(num_classes))
            diameter = math.exp(rng.uniform(math.log(lo), math.log(hi)))
            r = diameter / 2
            cx = rng.uniform(r, max(r, width - r))
            cy = rng.uniform(r, max(r, height - r))
            canvas = Image.new("L", (width, height), 0)
            corners = _draw_shape(ImageDraw.Draw(canvas), SHAPE_NAMES[cls], (cx, cy), r, rng)
            mask = np.asarray(canvas) > 0
            area = int(mask.sum())
            if area < 6:
                continue
            covered = owner[mask]
            covered = covered[covered >= 0]
            lost = np.bincount(covered, minlength=len(objects)) if covered.size else None
            if lost is not None and any(
                visible[j] - lost[j] < min_visible_frac * objects[j]["area"]
                for j in np.nonzero(lost)[0]
            ):
                continue
            overlapped = [objects[j]["colour"] for j in np.unique(covered)]
            colour = _pick_colour(
                rng, [c1, c2, *overlapped],
                [_MIN_CONTRAST, _MIN_CONTRAST] + [_MIN_OBJECT_CONTRAST] * len(overlapped),
            )
            if colour is None:
                continue
            if lost is not None:
                for j in np.nonzero(lost)[0]:
                    visible[j] -= int(lost[j])
            k = len(objects)
            owner[mask] = k
            image[mask] = colour
            rows, cols = np.nonzero(np.any(mask, axis=1))[0], np.nonzero(np.any(mask, axis=0))[0]
            objects.append({
                "class": cls, "colour": colour, "area": area,
                "box_xyxy": (int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1),
                "corners": corners,
            })
            visible.append(area)
            break
    for k, obj in enumerate(objects):
        obj["mask"] = owner == k
    image += rng.normal(0, rng.uniform(0, 6), image.shape).astype(np.float32)
    return np.clip(np.rint(image), 0, 255).astype(np.uint8), objects


def generate_shapes(
    out_dir: str | os.PathLike,
    num_images: int,
    *,
    image_size: SizeSpec = (128, 128),
    seed: int,
    num_classes: int = 3,
    min_objects: int = 1,
    max_objects: int = 6,
    min_size_frac: float = 0.05,
    max_size_frac: float = 0.6,
    min_visible_frac: float = 0.3,
    image_format: str = "jpg",
    keypoints: bool = False,
    masks: bool = False,
) -> Path:
    """Writes ``out_dir/images/*`` and ``out_dir/annotations.json``; returns the JSON path.

    ``image_size``: an int (square), ``(H, W)``, or ``((hmin, hmax), (wmin, wmax))`` to draw
    each image's size uniformly. Classes are the first ``num_classes`` of :data:`SHAPE_NAMES`.
    Skips all work when ``out_dir`` already holds a data set made with the same parameters.

    ``keypoints``: squares and triangles also get COCO keypoints, their corners (x, y, v=2) in
    the order of :data:`SHAPE_KEYPOINTS`, and their categories the keypoint names and
    skeleton; the images are the same as without.

    ``masks``: every annotation also gets its exact instance mask as a ``segmentation``
    (compressed RLE): the pixels of the image its shape covers (later shapes drawn over it
    excluded, so the masks of an image are disjoint; its box stays the full shape's). The
    images are the same as without.
    """
    if not 1 <= num_classes <= len(SHAPE_NAMES):
        raise ValueError(f"num_classes must be in 1..{len(SHAPE_NAMES)}, got {num_classes}")
    if num_images < 1:
        raise ValueError(f"num_images must be >= 1, got {num_images}")
    if not 0 <= min_objects <= max_objects:
        raise ValueError(f"need 0 <= min_objects <= max_objects, got {min_objects}, {max_objects}")
    if not 0 < min_size_frac <= max_size_frac <= 1:
        raise ValueError(
            f"need 0 < min_size_frac <= max_size_frac <= 1, got {min_size_frac}, {max_size_frac}"
        )
    fmt = image_format.lower().lstrip(".")
    if fmt not in ("jpg", "jpeg", "png"):
        raise ValueError(f"image_format must be 'jpg' or 'png', got {image_format!r}")
    sample_size = _size_sampler(image_size)

    out = Path(out_dir)
    images_dir = out / "images"
    ann_path = out / "annotations.json"
    stamp_path = out / "params.json"
    stamp = {
        "generator_version": GENERATOR_VERSION, "num_images": num_images,
        "image_size": np.asarray(image_size).tolist(), "seed": int(seed),
        "num_classes": num_classes, "min_objects": min_objects, "max_objects": max_objects,
        "min_size_frac": min_size_frac, "max_size_frac": max_size_frac,
        "min_visible_frac": min_visible_frac, "image_format": fmt,
    }
    if keypoints:  # only then: stamps written before keypoints existed stay valid
        stamp["keypoints"] = True
    if masks:
        stamp["masks"] = True
    if _is_done(stamp_path, stamp, ann_path, images_dir, num_images, fmt):
        return ann_path

    if stamp_path.exists():
        stamp_path.unlink()
    if images_dir.exists():
        shutil.rmtree(images_dir)
    images_dir.mkdir(parents=True)

    images, annotations = [], []
    for i in range(num_images):
        rng = np.random.default_rng([seed, i])
        height, width = sample_size(rng)
        pixels, objects = render_shapes_image(
            rng, height, width, num_classes, min_objects=min_objects, max_objects=max_objects,
            min_size_frac=min_size_frac, max_size_frac=max_size_frac,
            min_visible_frac=min_visible_frac,
        )
        file_name = f"{i:06d}.{fmt}"
        pil = Image.fromarray(pixels)
        if fmt == "png":
            pil.save(images_dir / file_name, format="PNG")
        else:
            pil.save(images_dir / file_name, format="JPEG", quality=92)
        images.append({"id": i + 1, "file_name": file_name, "height": height, "width": width})
        for obj in objects:
            x0, y0, x1, y1 = obj["box_xyxy"]
            annotation = {
                "id": len(annotations) + 1, "image_id": i + 1, "category_id": obj["class"] + 1,
                "bbox": [x0, y0, x1 - x0, y1 - y0], "area": obj["area"], "iscrowd": 0,
            }
            if keypoints and SHAPE_NAMES[obj["class"]] in SHAPE_KEYPOINTS:
                annotation["keypoints"] = [round(float(v), 2) for x, y in obj["corners"]
                                           for v in (x, y, 2)]
                annotation["num_keypoints"] = len(obj["corners"])
            if masks:
                annotation["segmentation"] = coco_rle(obj["mask"])
            annotations.append(annotation)
    categories = [{"id": c + 1, "name": SHAPE_NAMES[c], "supercategory": "shape"}
                  for c in range(num_classes)]
    if keypoints:
        for category in categories:
            if category["name"] in SHAPE_KEYPOINTS:
                names, skeleton, _ = SHAPE_KEYPOINTS[category["name"]]
                category["keypoints"] = list(names)
                category["skeleton"] = [list(e) for e in skeleton]
    data = {
        "info": {"description": "jaxdet synthetic shapes", "version": GENERATOR_VERSION},
        "licenses": [],
        "categories": categories,
        "images": images,
        "annotations": annotations,
    }
    tmp = ann_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, ann_path)
    stamp_path.write_text(json.dumps(stamp, indent=1, sort_keys=True))
    return ann_path


def _is_done(stamp_path, stamp, ann_path, images_dir, num_images, fmt) -> bool:
    try:
        if json.loads(stamp_path.read_text()) != stamp or not ann_path.is_file():
            return False
    except (OSError, ValueError):
        return False
    return all((images_dir / f"{i:06d}.{fmt}").is_file() for i in range(num_images))
