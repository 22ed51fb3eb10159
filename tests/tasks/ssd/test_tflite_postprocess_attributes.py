"""The settings an SSD-family task gives TF's ``TFLite_Detection_PostProcess`` operation (the
``tflite_tf`` export): the anchors in the operation's (y_center, x_center, height, width)
form, the box coder's scales and the thresholds; a box coder the operation cannot decode is
refused in one line. (The file itself is compared with TF's in the export tests, which need
TensorFlow.)"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from jaxdet import tasks
from jaxdet.config.loader import load_config


@pytest.fixture(scope="module")
def task():
    return tasks.resolve(load_config("shapes_demo")).build_task()


def test_attributes_are_the_models_own(task):
    attributes = task.detection_postprocess_attributes()
    yc, xc, h, w = attributes["anchors"].T
    corners = np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
    np.testing.assert_allclose(corners, task.anchors, atol=1e-6)
    assert attributes["scales"] == (10.0, 10.0, 5.0, 5.0)
    assert attributes["num_classes"] == 3
    assert (attributes["score_threshold"], attributes["iou_threshold"]) == (0.01, 0.5)


def test_a_box_coder_the_operation_cannot_decode_is_refused(task):
    clamped = dataclasses.replace(task, box_coder=dataclasses.replace(task.box_coder,
                                                                      max_log_scale=4.0))
    with pytest.raises(ValueError, match="decodes the faster_rcnn box coder with its four "
                                         "scales only"):
        clamped.detection_postprocess_attributes()
