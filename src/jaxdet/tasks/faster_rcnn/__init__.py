"""Faster and Mask R-CNN (``model.type: faster_rcnn``): ``task.FasterRCNNTask`` on the task
seam, its networks in ``model.py`` (C4, with the mask head) and ``fpn_model.py`` (FPN), its
builder in ``build.py``, its pure functions in ``ops.py`` (and ``core.grid_anchors``), its
minibatch samplers in ``samplers.py``; where a TF OD API checkpoint's tensors go in
``tf_names.py`` (ResNet) and ``tf_names_irv2.py`` (Inception-ResNet-v2)."""

from jaxdet.tasks.faster_rcnn.model import FasterRCNN
from jaxdet.tasks.faster_rcnn.task import FasterRCNNParams, FasterRCNNTask

__all__ = ["FasterRCNN", "FasterRCNNParams", "FasterRCNNTask"]
