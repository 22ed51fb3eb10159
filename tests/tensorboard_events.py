"""Read back what a run wrote to TensorBoard: the image summaries of the event files in a
folder, parsed with jaxdet's own TFRecord reader and tensorboardX's ``Event`` message (the
``tensorboard`` package is not installed). Import as ``from tensorboard_events import
read_images`` (the suite's root folder is on ``sys.path``)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from jaxdet.data.tfrecord import iter_tfrecord


def _values(logdir: str | Path):
    """(step, summary value) of every event file in ``logdir``, in file order."""
    from tensorboardX.proto import event_pb2

    for path in sorted(Path(logdir).glob("events.out.tfevents.*")):
        for _, data in iter_tfrecord(path):
            event = event_pb2.Event.FromString(data)
            for value in event.summary.value:
                yield event.step, value


def read_images(logdir: str | Path) -> dict[tuple[str, int], np.ndarray]:
    """(tag, step) -> the decoded pixels (uint8 [H, W, C]) of every image summary in the
    event files of ``logdir``; the size each summary states is checked against its PNG."""
    images = {}
    for step, value in _values(logdir):
        if value.HasField("image"):
            with Image.open(io.BytesIO(value.image.encoded_image_string)) as png:
                assert png.format == "PNG"
                pixels = np.asarray(png)
            assert pixels.shape[:2] == (value.image.height, value.image.width)
            images[value.tag, step] = pixels
    return images


def read_scalars(logdir: str | Path) -> dict[tuple[str, int], float]:
    """(tag, step) -> value of every scalar summary in the event files of ``logdir``."""
    return {(value.tag, step): value.simple_value for step, value in _values(logdir)
            if value.WhichOneof("value") == "simple_value"}


__all__ = ["read_images", "read_scalars"]
