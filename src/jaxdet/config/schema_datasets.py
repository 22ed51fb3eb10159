"""The datasets a config reads (``data.train`` / ``data.eval``): COCO JSON, Pascal VOC,
generated shapes and TF OD API TFRecords, one ``type`` each (``DatasetConfig``). Re-exported
by ``config.schema``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from jaxdet.config.schema_base import Strict, later_field


class _DatasetConfig(Strict):
    """Fields every dataset has. ``sample_1_of_n_examples``: keep one example in every n, the
    dataset's items 0, n, 2n, ... in its order (the TF OD API input reader's field, and what
    ``model_main_tf2 --sample_1_of_n_eval_examples`` sets on the eval data)."""

    sample_1_of_n_examples: int = Field(1, ge=1)


class CocoDataConfig(_DatasetConfig):
    """A COCO instances JSON file and the folder its ``file_name`` entries are relative to.
    ``class_index``: ``contiguous`` (the file's categories in id order are classes 0, 1, ...),
    ``id_minus_one`` (class = category id - 1, gaps kept: how TF OD API models number
    COCO, so a 90-class zoo model evaluates on COCO's own JSON) or ``id`` (class = category
    id, gaps and 0 kept: torchvision's 91-class COCO detectors)."""

    type: Literal["coco"]
    annotation_file: str
    image_dir: str
    class_index: Literal["contiguous", "id_minus_one", "id"] = "contiguous"


class VocDataConfig(_DatasetConfig):
    """Pascal VOC: a folder of XML annotations and a folder of images. With
    ``data.load_masks`` the instance masks are the ``SegmentationObject`` PNGs beside
    ``annotation_dir`` (VOC's layout); images without one are left out, so use the
    segmentation image set."""

    type: Literal["voc"]
    annotation_dir: str
    image_dir: str
    class_names: tuple[str, ...] | None = None


class ShapesDataConfig(_DatasetConfig):
    """Generated shapes (written as COCO JSON under ``output_dir``, reused when present).
    ``keypoints``: squares and triangles also carry their corners as COCO keypoints
    (``data.shapes.SHAPE_KEYPOINTS``: 4 for a square, 3 for a triangle)."""

    type: Literal["shapes"]
    output_dir: str = "data/shapes_train"
    num_images: int = Field(512, ge=1)
    seed: int = 0
    image_size: tuple[int, int] = (128, 128)
    num_classes: int = Field(3, ge=1)
    max_objects: int = Field(6, ge=1)
    min_size_frac: float = Field(0.08, gt=0.0, le=1.0)
    max_size_frac: float = Field(0.6, gt=0.0, le=1.0)
    keypoints: bool = later_field(False)


class TfRecordDataConfig(_DatasetConfig):
    """TF OD API TFRecord files of tf.train.Example (``input_path``: files or globs such as
    ``train-?????-of-00256.tfrecord``; one string or a list). Class index = label - 1; names
    from ``label_map_path`` (a StringIntLabelMap pbtxt) when given."""

    type: Literal["tfrecord"]
    input_path: tuple[str, ...] = Field(min_length=1)
    label_map_path: str | None = None

    @field_validator("input_path", mode="before")
    @classmethod
    def _one_or_many(cls, value):
        return (value,) if isinstance(value, str) else value


DatasetConfig = Annotated[
    CocoDataConfig | VocDataConfig | ShapesDataConfig | TfRecordDataConfig,
    Field(discriminator="type"),
]


__all__ = ["CocoDataConfig", "DatasetConfig", "ShapesDataConfig", "TfRecordDataConfig",
           "VocDataConfig"]
