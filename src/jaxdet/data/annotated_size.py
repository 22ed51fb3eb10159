"""The size an annotation gives an image against the size its file decodes to.

Boxes are read relative to the annotated size (COCO ``width`` / ``height``, a TFRecord's
``image/height`` / ``image/width``) and then lie on the decoded image, so where the two differ
the boxes are scaled with it. That is right for a file resized after labelling and wrong for
one whose pixels are stored rotated: jaxdet, like the TF OD API and pycocotools, uses a JPEG's
pixels as stored, ignoring its EXIF orientation, while a labelling tool that shows photos as
displayed writes boxes and sizes for the rotated image. Each file whose sizes differ is named
once per process in a warning, with its EXIF orientation when that explains the difference.
"""

from __future__ import annotations

import io
import logging

from jaxdet.data.decode import read_image_bytes

log = logging.getLogger("jaxdet.data")

_warned: set[str] = set()
_ROTATED = {5, 6, 7, 8}  # EXIF orientations that swap width and height when displayed


def _exif_orientation(record: dict) -> int | None:
    from PIL import Image


    try:
        ref = record.get("image_bytes_ref")
        source = (io.BytesIO(read_image_bytes(ref, str(record.get("image_path"))))
                  if ref else record["image_path"])
        with Image.open(source) as image:
            return image.getexif().get(0x0112)
    except Exception:  # noqa: BLE001 - only an explanation for the warning
        return None


def check_annotated_size(record: dict, decoded_hw: tuple[int, int]) -> str | None:
    """Warns (once per file) when ``record``'s annotated height / width differ from the
    decoded image's; returns the warning's text (None: they agree, or none is annotated)."""
    annotated = (int(record.get("height") or 0), int(record.get("width") or 0))
    decoded = (int(decoded_hw[0]), int(decoded_hw[1]))
    if 0 in annotated or annotated == decoded:
        return None
    name = str(record.get("image_path") or record.get("image_bytes_ref"))
    if name in _warned:
        return None
    _warned.add(name)
    text = (f"{name} [image id {record.get('image_id')}]: annotated as "
            f"{annotated[1]}x{annotated[0]}, decodes to {decoded[1]}x{decoded[0]}; its boxes are "
            "read relative to the annotated size and scaled to the decoded image")
    orientation = _exif_orientation(record)
    if orientation in _ROTATED and annotated == decoded[::-1]:
        text += (f". Its EXIF orientation is {orientation} (displayed rotated): the annotation "
                 "was probably made on the displayed image, while jaxdet (like the TF OD API) "
                 "uses the pixels as stored; rotate the file's pixels (e.g. `exiftran -ai`) or "
                 "its annotations")
    log.warning(text)
    return text


__all__ = ["check_annotated_size"]
