"""CenterNet (objects as points, ``model.type: center_net``): ``task.CenterNetTask`` on the task
seam, its network in ``model.py``, its builder in ``build.py``, keypoint tasks in
``keypoints.py``, DeepMAC instance masks (``model.mask_head``) in ``deepmac.py``, its pure
functions in ``targets.py``, ``keypoint_ops.py`` and ``deepmac_ops.py``; its necks in
``neck_fpn.py`` (ResNet-v1 FPN) and ``neck_deconv.py`` (ResNet-v2 upsampling stack); where a TF
OD API checkpoint's tensors go in ``tf_names.py``."""

from jaxdet.tasks.center_net.model import CenterNet
from jaxdet.tasks.center_net.task import CenterNetTask

__all__ = ["CenterNet", "CenterNetTask"]
