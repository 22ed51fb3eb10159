"""CenterNet (objects as points): ``tasks.center_net.task.CenterNetTask`` on the task seam,
its network in ``model.py``, its pure functions in ``core.center_net``. The config section
(``model.type: center_net``) and the TF OD API's feature extractors come next."""

from jaxdet.tasks.center_net.model import CenterNet
from jaxdet.tasks.center_net.task import CenterNetTask

__all__ = ["CenterNet", "CenterNetTask"]
