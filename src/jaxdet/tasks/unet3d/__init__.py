"""3D U-Net volumetric segmentation (``model.type: unet3d``, MLPerf's KiTS19 network):
``task.UNet3DTask`` on the task seam, its network in ``model.py``, its builder in ``build.py``,
its pure functions (Dice, cross-entropy, sliding window) in ``tasks.unet3d.segmentation``,
the Cloud TPU reference's network in ``tpu_reference.py``, a train step's device memory in
``memory.py``, evaluation pictures in ``pictures.py``.

Volume data: ``volume_io`` (NIfTI, ``.npy``, ``.npz`` volumes and listings, read and written;
``VolumeReadError``), ``volume_dataset`` (a checked data set of volumes and the random-patch
train loader), ``volume_transforms`` (preprocessing and augmentation), ``volumes`` (generated
volumes), ``data`` (config -> sources and loaders). Inference: ``predict`` (``jaxdet predict``
on volumes) and ``segmenter`` (what ``jaxdet.load`` returns for a 3D U-Net)."""

from jaxdet.tasks.unet3d.model import UNet3D
from jaxdet.tasks.unet3d.task import UNet3DTask

__all__ = ["UNet3D", "UNet3DTask"]
