"""The SSD family (SSD, RetinaNet, EfficientDet, torchvision's RetinaNet): ``model.type: ssd``."""

from jaxdet.tasks.ssd.build import build_ssd_task, ssd_fingerprint_fields
from jaxdet.tasks.ssd.task import MatchingParams, PostProcessParams, SSDTask

__all__ = ["MatchingParams", "PostProcessParams", "SSDTask", "build_ssd_task",
           "ssd_fingerprint_fields"]
