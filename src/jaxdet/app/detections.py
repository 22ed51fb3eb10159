"""What a detector found in one image, as numpy arrays, with COCO / JSON / picture views.

    found = detector.predict("photos/cat.jpg")
    found.boxes          # float32 [n, 4]: (x0, y0, x1, y1) in the image's own pixels
    found.scores         # float32 [n], best first
    found.class_names    # ["cat", ...]
    found.to_coco(image_id=7)   # COCO results rows
    found.draw().save("cat_detections.jpg")

``jaxdet predict`` writes :meth:`Detections.to_dict` of every image as its ``<name>.json``;
``Detections.from_model_output`` turns one row of a predict batch into a ``Detections``, for
the command and the Python API alike.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
from PIL import Image

from jaxdet.app.labels import Labels
from jaxdet.eval.coco_eval import BBOX_DECIMALS, SCORE_DECIMALS, coco_xywh
from jaxdet.eval.coco_mask_eval import masks_to_rle, paste_box_masks
from jaxdet.eval.runner import SAMPLES_SCORE_THRESHOLD
from jaxdet.eval.visualize import draw_detections, resize_masks


@dataclasses.dataclass(frozen=True, eq=False)
class Detections:
    """The objects a detector found in one image, best first.

    Attributes:
      boxes: float32 [n, 4], (x0, y0, x1, y1) in pixels of the image as given (not the
        network's input size); x to the right, y down, (0, 0) the top-left corner of the
        top-left pixel.
      scores: float32 [n], descending.
      classes: int32 [n], the model's class index 0..C-1 (``labels.names[k]``).
      labels: the model's class ids and names (:class:`Labels`).
      image_size: (height, width) of the image.
      masks: uint8 [n, height, width] (1 inside the object) for models that predict instance
        masks (Mask R-CNN, DeepMAC), else None.
      keypoints: float32 [n, K, 3] (x, y, score) in pixels for models with keypoint tasks,
        else None; a detection's own keypoints are the slots of its class's group
        (``labels.keypoint_layout``), the other slots are meaningless.
      source: the image file's path when it came from one, else None.
      image: the RGB pixels (uint8 [height, width, 3]) :meth:`draw` draws on, when kept.

    Example::

        found = detector.predict("street.jpg")
        people = found.above(0.5)
        people.draw().save("street_detections.jpg")
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
        (masks and keypoints filtered alike; this one is unchanged)."""
        keep = self.scores >= score_threshold
        return dataclasses.replace(
            self, boxes=self.boxes[keep], scores=self.scores[keep], classes=self.classes[keep],
            masks=None if self.masks is None else self.masks[keep],
            keypoints=None if self.keypoints is None else self.keypoints[keep])

    def to_dict(self) -> dict:
        """As ``jaxdet predict`` writes each image's JSON: ``{"image", "width", "height",
        "detections": [{"bbox": [x, y, w, h], "box_xyxy": [x0, y0, x1, y1], "class_id",
        "class_name", "score"[, "keypoints": [x1, y1, s1, ...]][, "segmentation": RLE]}]}``,
        numbers rounded as COCO results are (boxes to 2 decimals, scores to 6)."""
        yxyx = np.asarray(self.boxes_yxyx, np.float64)
        x0, y0, w, h = coco_xywh(yxyx)
        x1, y1 = np.round(yxyx[:, 3], BBOX_DECIMALS), np.round(yxyx[:, 2], BBOX_DECIMALS)
        s = np.round(np.asarray(self.scores, np.float64), SCORE_DECIMALS)
        rles = masks_to_rle(self.masks) if self.masks is not None else None
        layout = self.labels.keypoint_layout
        rows = []
        for i, k in enumerate(self.classes.tolist()):
            row = {"bbox": [float(x0[i]), float(y0[i]), float(w[i]), float(h[i])],
                   "box_xyxy": [float(x0[i]), float(y0[i]), float(x1[i]), float(y1[i])],
                   "class_id": int(self.labels.ids[k]), "class_name": self.labels.names[k],
                   "score": float(s[i])}
            group = layout.group_of_class(k) if (layout and self.keypoints is not None) else None
            if group is not None:
                row["keypoints"] = [
                    round(float(v), BBOX_DECIMALS if j < 2 else SCORE_DECIMALS)
                    for slot in group.slots for j, v in enumerate(self.keypoints[i, slot])]
            if rles is not None:
                row["segmentation"] = rles[i]
            rows.append(row)
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
            raise ValueError(f"image of size {tuple(pixels.shape[:2])} for detections of an "
                             f"image of size {tuple(self.image_size)} (height, width)")
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


__all__ = ["Detections"]
