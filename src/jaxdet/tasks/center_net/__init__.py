"""CenterNet (objects as points, ``model.type: center_net``): ``task.CenterNetTask`` on the task
seam, its network in ``model.py``, its builder in ``build.py``, its pure functions in
``core.center_net``. The TF OD API's own feature extractors and keypoints come next."""

from jaxdet.tasks.center_net.model import CenterNet
from jaxdet.tasks.center_net.task import CenterNetTask

__all__ = ["CenterNet", "CenterNetTask"]
