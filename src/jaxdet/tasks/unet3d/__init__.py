"""3D U-Net volumetric segmentation (``model.type: unet3d``, MLPerf's KiTS19 network):
``task.UNet3DTask`` on the task seam, its network in ``model.py``, its builder in ``build.py``,
its pure functions (Dice, cross-entropy, sliding window) in ``tasks.unet3d.segmentation``."""

from jaxdet.tasks.unet3d.model import UNet3D
from jaxdet.tasks.unet3d.task import UNet3DTask

__all__ = ["UNet3D", "UNet3DTask"]
