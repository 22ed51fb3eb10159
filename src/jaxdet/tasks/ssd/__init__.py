"""The SSD family (SSD, RetinaNet, EfficientDet, torchvision's RetinaNet): ``model.type: ssd``.

Modules: ``task`` (``SSDTask`` on the task seam), ``build`` (the detector, anchors, box coder,
loss, matching and post-processing from a config), ``model`` (backbone -> neck -> box
predictor), ``heads/`` (the box predictors), ``bifpn`` (EfficientDet's BiFPN),
``ssd_feature_maps`` (SSD's extra feature layers), ``loss`` (the batch detection loss),
``hard_example_miner`` (online hard example mining), ``summary`` (``jaxdet summary``),
``anchor_fit`` (how the anchors fit a dataset's boxes), ``tf_names`` (where a TF OD API
checkpoint's tensors go), ``torch_detectors`` (the whole-detector PyTorch files it reads),
``torchvision_names`` (torchvision's RetinaNet), ``effdet_names`` (effdet's EfficientDets)."""

from jaxdet.tasks.ssd.build import build_ssd_task, ssd_fingerprint_fields
from jaxdet.tasks.ssd.task import MatchingParams, PostProcessParams, SSDTask

__all__ = ["MatchingParams", "PostProcessParams", "SSDTask", "build_ssd_task",
           "ssd_fingerprint_fields"]
