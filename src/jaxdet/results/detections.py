"""What a detector found in one image, as numpy arrays, with COCO / JSON / picture views.

    found = detector.predict("photos/cat.jpg")
    found.boxes          # float32 [n, 4]: (x0, y0, x1, y1) in the image's own pixels
    found.scores         # float32 [n], best first
    found.class_names    # ["cat", ...]
    found.to_coco(image_id=7)   # COCO results rows
    found.draw().save("cat_detections.jpg")
    found[0]                    # the best one: a Detection
    found[found.scores > 0.5]   # a new Detections
    for d in found: print(d.class_name, d.score, d.box)
    found.to_pandas()           # a DataFrame, one row per detection

In a notebook, a ``Detections`` shows as its drawn image and a table of its best rows.

``jaxdet predict`` writes :meth:`Detections.to_dict` of every image as its ``<name>.json``;
``Detections.from_model_output`` turns one row of a predict batch into a ``Detections``, for
the command and the Python API alike.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from jaxdet.eval.coco_eval import BBOX_DECIMALS, SCORE_DECIMALS, coco_xywh
from jaxdet.eval.coco_mask_eval import masks_to_rle, paste_box_masks
from jaxdet.eval.runner import SAMPLES_SCORE_THRESHOLD
from jaxdet.eval.visualize import draw_detections, resize_masks
from jaxdet.results.labels import Labels

if TYPE_CHECKING:  # pandas is optional: only to_pandas needs it
    import pandas

REPR_BEST = 3   # classes and scores a one-line repr names
HTML_ROWS = 10  # rows of the notebook table


def _size_text(height: int, width: int) -> str:
    return f"{int(height)}x{int(width)} (h x w)"


def _rows(boxes: np.ndarray, scores: np.ndarray, class_ids: Sequence[int],
          class_names: Sequence[str], keypoints: Sequence[np.ndarray | None],
          masks: np.ndarray | None) -> list[dict]:
    """The JSON rows of ``n`` detections: ``boxes`` [n, 4] pixel (x0, y0, x1, y1), ``scores``
    [n], ``keypoints`` per detection its group's slots [S, 3] (x, y, score) or None, ``masks``
    [n, H, W] or None; numbers rounded as COCO results are. :meth:`Detections.to_dict` and
    :meth:`Detection.to_dict` both write their rows here, so they agree to the last digit."""
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    yxyx = np.asarray(boxes[:, [1, 0, 3, 2]], np.float64)
    x0, y0, w, h = coco_xywh(yxyx)
    x1, y1 = np.round(yxyx[:, 3], BBOX_DECIMALS), np.round(yxyx[:, 2], BBOX_DECIMALS)
    s = np.round(np.asarray(scores, np.float64).reshape(-1), SCORE_DECIMALS)
    rles = masks_to_rle(masks) if masks is not None else None
    rows = []
    for i in range(boxes.shape[0]):
        row = {"bbox": [float(x0[i]), float(y0[i]), float(w[i]), float(h[i])],
               "box_xyxy": [float(x0[i]), float(y0[i]), float(x1[i]), float(y1[i])],
               "class_id": int(class_ids[i]), "class_name": class_names[i],
               "score": float(s[i])}
        if keypoints[i] is not None:
            row["keypoints"] = [round(float(v), BBOX_DECIMALS if j < 2 else SCORE_DECIMALS)
                                for point in keypoints[i] for j, v in enumerate(point)]
        if rles is not None:
            row["segmentation"] = rles[i]
        rows.append(row)
    return rows


@dataclasses.dataclass(frozen=True, eq=False)
class Detection:
    """One object a detector found: what ``found[i]`` and ``for d in found`` give.

    Attributes:
      box: float32 [4], (x0, y0, x1, y1) in pixels of the image as given (x to the right,
        y down, (0, 0) the top-left corner of the top-left pixel), as a row of
        :attr:`Detections.boxes`.
      score: the detection's score, 0..1.
      class_index: the model's class index 0..C-1 (``labels.names[class_index]``).
      class_id: the dataset's category id of the class (COCO ids for COCO models).
      class_name: the class's name.
      mask: uint8 [height, width] (1 inside the object) for models that predict instance
        masks, else None.
      keypoints: float32 [K, 3] (x, y, score) in pixels for models with keypoint tasks, else
        None; only the slots of ``keypoint_slots`` belong to this object's class.
      keypoint_slots: the slots of ``keypoints`` that belong to this object's class (its
        keypoint group), or None when its class has no keypoints.

    Example::

        best = found[0]
        print(best)              # Detection(cat 0.91 box=(12.0, 30.5, 200.1, 180.0))
        x0, y0, x1, y1 = best.box
        print(best.class_name, best.score, best.to_dict()["bbox"])
    """

    box: np.ndarray
    score: float
    class_index: int
    class_id: int
    class_name: str
    mask: np.ndarray | None = dataclasses.field(default=None, repr=False)
    keypoints: np.ndarray | None = dataclasses.field(default=None, repr=False)
    keypoint_slots: tuple[int, ...] | None = dataclasses.field(default=None, repr=False)

    def __repr__(self) -> str:
        box = ", ".join(f"{float(v):.1f}" for v in np.asarray(self.box).reshape(-1))
        return f"Detection({self.class_name} {self.score:.2f} box=({box}))".replace("\n", " ")

    def to_dict(self) -> dict:
        """As its row of :meth:`Detections.to_dict` ``["detections"]``: ``{"bbox": [x, y, w,
        h], "box_xyxy": [x0, y0, x1, y1], "class_id", "class_name", "score"[, "keypoints":
        [x1, y1, s1, ...]][, "segmentation": RLE]}``, rounded alike (boxes to 2 decimals,
        scores to 6)."""
        points = None
        if self.keypoints is not None and self.keypoint_slots is not None:
            points = np.asarray(self.keypoints)[list(self.keypoint_slots)]
        masks = None if self.mask is None else np.asarray(self.mask)[None]
        return _rows(np.asarray(self.box)[None], np.asarray([self.score]), [self.class_id],
                     [self.class_name], [points], masks)[0]


@dataclasses.dataclass(frozen=True, eq=False)
class Detections:
    """The objects a detector found in one image, best first.

    A sequence of :class:`Detection`: ``len(found)``, ``found[0]`` / ``found[-1]`` (one
    :class:`Detection`), ``found[:5]``, ``found[[0, 2]]`` and ``found[found.scores > 0.5]``
    (a new ``Detections``: masks and keypoints taken alike, the labels, image and source kept),
    and ``for d in found``. Printed, it is one line; in a notebook, its drawn image and a table
    of its best rows.

    Attributes:
      boxes: float32 [n, 4], (x0, y0, x1, y1) in pixels of the image as given (not the
        network's input size); x to the right, y down, (0, 0) the top-left corner of the
        top-left pixel.
      scores: float32 [n], descending.
      classes: int32 [n], the model's class index 0..C-1 (``labels.names[k]``).
      labels: the model's class ids and names (:class:`Labels`).
      image_size: (height, width) of the image, in that order, like numpy's ``image.shape[:2]``
        (not PIL's (width, height)); :attr:`height` and :attr:`width` name them, and
        :meth:`to_dict` writes them as ``"width"`` and ``"height"``.
      masks: uint8 [n, height, width] (1 inside the object) for models that predict instance
        masks (Mask R-CNN, DeepMAC), else None.
      keypoints: float32 [n, K, 3] (x, y, score) in pixels for models with keypoint tasks,
        else None; a detection's own keypoints are the slots of its class's group
        (``labels.keypoint_layout``), the other slots are meaningless.
      source: the image file's path when it came from one, else None.
      image: the RGB pixels (uint8 [height, width, 3]) :meth:`draw` draws on, when kept.

    Example::

        found = detector.predict("street.jpg")
        print(found)        # Detections(7 objects in 480x640 (h x w) image 'street.jpg': ...)
        best = found[0]     # Detection(person 0.97 box=(12.0, 30.5, 200.1, 180.0))
        confident = found[found.scores > 0.5]
        for d in confident:
            print(d.class_name, d.score, d.box)
        confident.draw().save("street_detections.jpg")
        json.dump(found.to_coco(image_id=42), open("results.json", "w"))
    """

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray
    labels: Labels
    image_size: tuple[int, int]
    masks: np.ndarray | None = None
    keypoints: np.ndarray | None = None
    source: str | None = None
    image: np.ndarray | None = dataclasses.field(default=None, repr=False)

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    def __getitem__(self, key: Any) -> Detection | Detections:
        """``found[i]``: the i-th :class:`Detection` (negative counts from the end);
        ``found[a:b]``, ``found[[i, j]]`` (integer list or array) or ``found[mask]`` (bool
        [n]): a new ``Detections`` of those rows, in that order.

        Raises:
          IndexError: an index out of range, or a mask whose length is not ``len(self)``.
          TypeError: a key of another kind (a float, a string, a tuple)."""
        n = len(self)
        if isinstance(key, int | np.integer) and not isinstance(key, bool | np.bool_):
            i = int(key)
            if not -n <= i < n:
                raise IndexError(f"detection index {i} is out of range for {n} detections")
            return self._detection(i % n)
        if isinstance(key, slice):
            return self._take(np.arange(n)[key])
        if isinstance(key, list | np.ndarray) or hasattr(key, "__array__"):
            index = np.asarray(key)
            if index.ndim == 0 and np.issubdtype(index.dtype, np.integer):  # a jax scalar
                return self[int(index)]
            if index.size == 0 and index.dtype != bool:
                index = index.astype(np.int64)
            if index.ndim != 1:
                raise IndexError(f"a Detections index array must be 1-D; got shape "
                                 f"{index.shape} for {n} detections")
            if index.dtype == bool:
                if index.shape[0] != n:
                    raise IndexError(f"boolean mask of length {index.shape[0]} for {n} "
                                     f"detections; it must have length {n}")
                return self._take(np.flatnonzero(index))
            if np.issubdtype(index.dtype, np.integer):
                bad = index[(index < -n) | (index >= n)]
                if bad.size:
                    raise IndexError(f"detection index {int(bad[0])} is out of range for {n} "
                                     f"detections")
                return self._take(index % max(n, 1))
            raise TypeError(f"a Detections index array must hold integers or booleans, not "
                            f"{index.dtype} (for {n} detections)")
        hint = " (use a list: found[[i, j]])" if isinstance(key, tuple) else ""
        raise TypeError(f"Detections indices must be integers, slices, integer lists or arrays, "
                        f"or boolean masks of length {n}, not {type(key).__name__}{hint}")

    def __iter__(self) -> Iterator[Detection]:
        """Each :class:`Detection`, best first."""
        for i in range(len(self)):
            yield self._detection(i)

    def _detection(self, i: int) -> Detection:
        k = int(self.classes[i])
        group = self.labels.keypoint_layout.group_of_class(k) if (
            self.labels.keypoint_layout and self.keypoints is not None) else None
        return Detection(
            box=np.array(self.boxes[i], np.float32), score=float(self.scores[i]),
            class_index=k, class_id=int(self.labels.ids[k]), class_name=self.labels.names[k],
            mask=None if self.masks is None else np.array(self.masks[i]),
            keypoints=None if self.keypoints is None else np.array(self.keypoints[i], np.float32),
            keypoint_slots=None if group is None else tuple(group.slots))

    def _take(self, index: np.ndarray) -> Detections:
        """The rows ``index`` (int [m], in range) as a new Detections: copies, not views."""
        return dataclasses.replace(
            self, boxes=self.boxes[index], scores=self.scores[index],
            classes=self.classes[index],
            masks=None if self.masks is None else self.masks[index],
            keypoints=None if self.keypoints is None else self.keypoints[index])

    def __repr__(self) -> str:
        n = len(self)
        where = f"{_size_text(*self.image_size)} image"
        if self.source is not None:
            where += f" {str(self.source)!r}"
        text = f"{n} object{'' if n == 1 else 's'} in {where}"
        if n:
            best = np.argsort(-np.asarray(self.scores, np.float64), kind="stable")[:REPR_BEST]
            names = [f"{self.labels.names[int(self.classes[i])]} {float(self.scores[i]):.2f}"
                     for i in best]
            text += ": " + ", ".join(names) + (", ..." if n > REPR_BEST else "")
        return f"Detections({text})".replace("\n", " ").replace("\r", " ")

    def _repr_png_(self) -> bytes | None:
        """The drawn image as PNG bytes, for notebooks; None (the text repr) when no image
        was kept or drawing fails."""
        if self.image is None:
            return None
        try:
            buffer = io.BytesIO()
            self.draw().save(buffer, format="PNG")
            return buffer.getvalue()
        except Exception:  # a notebook's display must never raise
            return None

    def _repr_html_(self) -> str | None:
        """The one-line repr, a table of the best rows and the drawn image, for notebooks;
        None (the text repr) when building it fails."""
        try:
            best = np.argsort(-np.asarray(self.scores, np.float64), kind="stable")[:HTML_ROWS]
            cells = "".join(
                "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
                    int(i), self.labels.names[int(self.classes[i])],
                    f"{float(self.scores[i]):.3f}",
                    *(f"{float(c):.1f}" for c in self.boxes[i]))) + "</tr>"
                for i in best)
            more = len(self) - len(best)
            head = "".join(f"<th>{h}</th>" for h in ("#", "class", "score", "x0", "y0", "x1", "y1"))
            parts = [f"<div><code>{html.escape(repr(self))}</code>"]
            if len(self):
                parts.append(f"<table><tr>{head}</tr>{cells}</table>")
            if more > 0:
                parts.append(f"<div>... and {more} more</div>")
            png = self._repr_png_()
            if png is not None:
                parts.append(f'<img src="data:image/png;base64,{base64.b64encode(png).decode()}"'
                             f' style="max-width:100%"/>')
            return "".join(parts) + "</div>"
        except Exception:  # a notebook's display must never raise
            return None

    @property
    def height(self) -> int:
        """The image's height in pixels (``image_size[0]``)."""
        return int(self.image_size[0])

    @property
    def width(self) -> int:
        """The image's width in pixels (``image_size[1]``)."""
        return int(self.image_size[1])

    @property
    def class_ids(self) -> np.ndarray:
        """int64 [n]: the dataset's category id of each detection."""
        return np.asarray([self.labels.ids[k] for k in self.classes.tolist()], np.int64)

    @property
    def class_names(self) -> list[str]:
        """The class name of each detection."""
        return [self.labels.names[k] for k in self.classes.tolist()]

    @property
    def boxes_yxyx(self) -> np.ndarray:
        """float32 [n, 4] (ymin, xmin, ymax, xmax) pixels: TF OD API's order, in pixels."""
        return self.boxes[:, [1, 0, 3, 2]]

    def above(self, score_threshold: float) -> Detections:
        """The detections with score >= ``score_threshold``, as a new :class:`Detections`
        (``self[self.scores >= score_threshold]``: masks and keypoints filtered alike; this one
        is unchanged)."""
        return self[np.asarray(self.scores) >= score_threshold]

    def to_dict(self) -> dict:
        """As ``jaxdet predict`` writes each image's JSON: ``{"image", "width", "height",
        "detections": [{"bbox": [x, y, w, h], "box_xyxy": [x0, y0, x1, y1], "class_id",
        "class_name", "score"[, "keypoints": [x1, y1, s1, ...]][, "segmentation": RLE]}]}``,
        numbers rounded as COCO results are (boxes to 2 decimals, scores to 6); row ``i`` is
        ``self[i].to_dict()``."""
        layout = self.labels.keypoint_layout
        keypoints: list[np.ndarray | None] = []
        for i, k in enumerate(self.classes.tolist()):
            group = layout.group_of_class(k) if (layout and self.keypoints is not None) else None
            keypoints.append(None if group is None else self.keypoints[i][list(group.slots)])
        rows = _rows(self.boxes, self.scores, self.class_ids.tolist(), self.class_names,
                     keypoints, self.masks)
        height, width = self.image_size
        return {"image": self.source, "width": int(width), "height": int(height),
                "detections": rows}

    def to_json(self, indent: int | None = 1) -> str:
        """:meth:`to_dict` as JSON text (``indent`` spaces per level; None: one line), the
        text ``jaxdet predict`` writes as ``<name>.json``."""
        return json.dumps(self.to_dict(), indent=indent)

    def to_coco(self, image_id: int = 0) -> list[dict]:
        """COCO results rows (what ``pycocotools``' ``loadRes`` reads): ``image_id``,
        ``category_id``, ``bbox`` [x, y, width, height], ``score``, and ``segmentation``
        (compressed RLE) / ``keypoints`` where the model has them."""
        rows = []
        for row in self.to_dict()["detections"]:
            out = {"image_id": int(image_id), "category_id": row["class_id"],
                   "bbox": row["bbox"], "score": row["score"]}
            for key in ("segmentation", "keypoints"):
                if key in row:
                    out[key] = row[key]
            rows.append(out)
        return rows

    def to_pandas(self) -> pandas.DataFrame:
        """A table with one row per detection, best first.

        Returns:
          A ``pandas.DataFrame`` with columns ``x0, y0, x1, y1`` (pixels, as :attr:`boxes`),
          ``score``, ``class_id`` (int64, the dataset's category id) and ``class_name``
          (str); unrounded, the float32 values widened to float64 (so ``.round(1)`` shows
          round numbers).
        Raises:
          ImportError: pandas is not installed (``pip install pandas``).
        """
        try:
            import pandas
        except ImportError as e:
            raise ImportError("Detections.to_pandas needs pandas: pip install pandas") from e
        boxes = np.asarray(self.boxes, np.float32).reshape(-1, 4).astype(np.float64)
        return pandas.DataFrame({
            "x0": boxes[:, 0], "y0": boxes[:, 1], "x1": boxes[:, 2], "y1": boxes[:, 3],
            "score": np.asarray(self.scores, np.float32).reshape(-1).astype(np.float64),
            "class_id": self.class_ids.astype(np.int64),
            "class_name": pandas.Series(self.class_names, dtype=object)})

    def draw(self, score_threshold: float = SAMPLES_SCORE_THRESHOLD,
             image: np.ndarray | Image.Image | None = None) -> Image.Image:
        """A picture: the image with the detections scoring >= ``score_threshold`` (default 0.3)
        drawn (boxes, class and score tags, masks and keypoint skeletons where present), on
        ``image`` or the pixels kept with the detections.

        Returns:
          A PIL RGB image of ``image_size`` (``.save(path)``, or shown by a notebook).
        Raises:
          ValueError: no image was kept and none is given, or its size is not ``image_size``.
        """
        pixels = self.image if image is None else np.asarray(
            image.convert("RGB") if isinstance(image, Image.Image) else image)
        if pixels is None:
            raise ValueError("these detections kept no image: pass draw(image=...)")
        if tuple(pixels.shape[:2]) != tuple(self.image_size):
            raise ValueError(f"an image of {_size_text(*pixels.shape[:2])} for detections of "
                             f"a {_size_text(*self.image_size)} image")
        shown = self.above(score_threshold)
        extra: dict = {}
        layout = self.labels.keypoint_layout
        if layout and shown.keypoints is not None:
            extra = {"keypoints": shown.keypoints[..., [1, 0]], "edges": layout.edges,
                     "keypoint_mask": layout.slot_mask(shown.classes)
                     & (shown.keypoints[..., 2] >= score_threshold)}
        if shown.masks is not None:
            extra["masks"] = resize_masks(shown.masks, pixels.shape[:2])
        return draw_detections(pixels, shown.boxes_yxyx, shown.classes, shown.scores,
                               list(self.labels.names), **extra)

    @classmethod
    def from_model_output(cls, output: dict, row: int, labels: Labels, *,
                          image_size: tuple[int, int], score_threshold: float,
                          max_detections: int | None = None, source: str | None = None,
                          image: np.ndarray | None = None) -> Detections:
        """Row ``row`` of a predict batch's output (``task.predict``: ``boxes`` [B, N, 4]
        pixel (ymin, xmin, ymax, xmax) of the original image, ``scores``, ``classes``,
        ``num_detections`` [B], and ``keypoints`` [B, N, K, 2] pixel (y, x) /
        ``keypoint_scores``, ``masks`` [B, N, mh, mw] box-relative probabilities where the
        model has them): the valid detections with score >= ``score_threshold``, best first,
        at most ``max_detections``; box masks pasted into the ``image_size`` image and
        binarized at 0.5 (as TF's exported Mask R-CNN does)."""
        n = int(output["num_detections"][row])
        scores = np.asarray(output["scores"][row][:n], np.float32)
        order = np.argsort(-scores, kind="stable")
        order = order[scores[order] >= score_threshold]
        if max_detections is not None:
            order = order[:max_detections]
        yxyx = np.asarray(output["boxes"][row], np.float32)[order].reshape(-1, 4)
        height, width = (int(v) for v in image_size)
        keypoints = None
        if "keypoints" in output:
            points = np.asarray(output["keypoints"][row], np.float32)[order]
            point_scores = np.asarray(output["keypoint_scores"][row], np.float32)[order]
            keypoints = np.concatenate([points[..., [1, 0]], point_scores[..., None]], axis=-1)
        masks = None
        if "masks" in output:
            box_masks = np.asarray(output["masks"][row])[order]
            normalized = np.asarray(yxyx, np.float64) / np.array([height, width] * 2)
            masks = paste_box_masks(box_masks, normalized, height, width)
        return cls(boxes=yxyx[:, [1, 0, 3, 2]], scores=scores[order],
                   classes=np.asarray(output["classes"][row])[order].astype(np.int32),
                   labels=labels, image_size=(height, width), masks=masks,
                   keypoints=keypoints, source=source, image=image)


__all__ = ["Detection", "Detections"]
