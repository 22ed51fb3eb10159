"""Faster R-CNN, C4 variant (``model.type: faster_rcnn``): ``task.FasterRCNNTask`` on the task
seam, its network in ``model.py``, its builder in ``build.py``, its pure functions in
``tasks.faster_rcnn.ops`` and ``core.grid_anchors``. The FPN variant, RoI Align and the mask head
come next."""

from jaxdet.tasks.faster_rcnn.model import FasterRCNN
from jaxdet.tasks.faster_rcnn.task import FasterRCNNParams, FasterRCNNTask

__all__ = ["FasterRCNN", "FasterRCNNParams", "FasterRCNNTask"]
