"""The ``data`` section of ``model.type: unet3d``: image and label volumes, their
preprocessing and the random patches training reads (re-exported by ``schema.py``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from jaxdet.config.schema_base import Strict


class GeneratedVolumesDataConfig(Strict):
    """Generated volumes that need no download: 1 to ``max_objects`` spheres (class 1) and
    axis-aligned cubes (class 2) of random centre and size in Gaussian noise of standard
    deviation ``noise`` (``tasks.unet3d.volumes.GeneratedVolumes``). Volume i is drawn from seed
    (``seed``, i), so the same settings give the same volumes on every machine; use another
    ``seed`` for held-out volumes. ``every_class``: every volume holds at least one sphere
    and one cube (as every KiTS19 case holds a kidney); with a class absent from a volume, a
    single voxel predicted as that class scores its Dice 0 (MLPerf's convention)."""

    type: Literal["generated_volumes"]
    num_volumes: int = Field(16, ge=1)
    shape: tuple[int, int, int] = (64, 64, 64)
    seed: int = 0
    max_objects: int = Field(3, ge=1)
    noise: float = Field(0.5, ge=0.0)
    every_class: bool = False

    @model_validator(mode="after")
    def _room_for_every_class(self) -> GeneratedVolumesDataConfig:
        if self.every_class and self.max_objects < 2:
            raise ValueError(f"every_class needs max_objects >= 2 (a sphere and a cube); got "
                             f"{self.max_objects}")
        return self


class VolumeListDataConfig(Strict):
    """Image and label volumes named by a listing file: a Medical Segmentation Decathlon
    style JSON (``{"training": [{"image": ..., "label": ...}, ...]}``; ``split`` picks the
    key) or a CSV / text file of ``image,label`` lines. Paths are relative to the listing's
    folder. Volumes are NIfTI (``.nii``, ``.nii.gz``: spacing from the header) or NumPy
    (``.npy``, spacing 1 mm; ``.npz`` with ``image`` / ``label`` and an optional
    ``spacing``). The first three array axes are (D, H, W) as stored; a fourth holds
    channels. A case whose label has another shape or spacing than its image is left out
    before training, named and counted; one that cannot be read (a truncated ``.nii.gz``)
    or holds labels outside ``[0, model.num_classes)`` is skipped when read, named and
    counted."""

    type: Literal["volume_list"]
    listing: str
    split: str = "training"


VolumeDatasetConfig = Annotated[GeneratedVolumesDataConfig | VolumeListDataConfig,
                                Field(discriminator="type")]


class VolumeAugmentConfig(Strict):
    """Random changes of every training patch, image and label together (MLPerf's KiTS19
    recipe by default): each axis flipped with ``flip_probability``; with
    ``rotate_probability`` a rotation of up to ``rotation_degrees`` about a random axis and
    an isotropic scale drawn from ``scale_range``; with ``brightness_probability`` the
    intensities multiplied by a factor from ``brightness_range``; with ``noise_probability``
    Gaussian noise of a standard deviation up to ``noise_std`` added."""

    flip_probability: float = Field(0.33, ge=0.0, le=1.0)
    rotate_probability: float = Field(0.0, ge=0.0, le=1.0)
    rotation_degrees: float = Field(15.0, ge=0.0, le=180.0)
    scale_range: tuple[float, float] = (0.85, 1.15)
    brightness_probability: float = Field(0.1, ge=0.0, le=1.0)
    brightness_range: tuple[float, float] = (0.7, 1.3)
    noise_probability: float = Field(0.1, ge=0.0, le=1.0)
    noise_std: float = Field(0.1, ge=0.0)

    @model_validator(mode="after")
    def _ranges_ordered(self) -> VolumeAugmentConfig:
        for name in ("scale_range", "brightness_range"):
            lo, hi = getattr(self, name)
            if not 0 < lo <= hi:
                raise ValueError(f"{name} {[lo, hi]}: need 0 < low <= high")
        return self


class VolumeDataConfig(Strict):
    """Volumes for the 3D U-Net (``model.type: unet3d``; ``type: volumes`` is implied there).

    Every volume read is resampled to ``target_spacing`` (mm per voxel along D, H, W;
    trilinear for the image, nearest for the label; null keeps each volume's own), its
    intensities clipped to ``intensity_clip`` and normalized as (x - ``intensity_mean``) /
    ``intensity_std`` (both null: each volume by its own mean and standard deviation).
    MLPerf's KiTS19: spacing (1.6, 1.2, 1.2), clip (-79, 304), mean 101, std 76.9.
    Training reads random patches of ``model.patch_size``: with probability
    ``foreground_oversampling`` a patch holds a random foreground voxel, else it lies
    anywhere (smaller volumes are padded). ``worker_count`` threads prepare a batch's
    patches; ``cache_volumes`` keeps every preprocessed volume in memory after its first
    read. Evaluation segments whole volumes by sliding windows (``model.sliding_window``)."""

    type: Literal["volumes"] = "volumes"
    train: VolumeDatasetConfig | None = None
    eval: VolumeDatasetConfig | None = None
    target_spacing: tuple[float, float, float] | None = None
    intensity_clip: tuple[float, float] | None = None
    intensity_mean: float | None = None
    intensity_std: float | None = Field(None, gt=0.0)
    foreground_oversampling: float = Field(0.4, ge=0.0, le=1.0)
    augment: VolumeAugmentConfig = VolumeAugmentConfig()
    worker_count: int = Field(0, ge=0)
    cache_volumes: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> VolumeDataConfig:
        if (self.intensity_mean is None) != (self.intensity_std is None):
            raise ValueError("give both intensity_mean and intensity_std (a fixed "
                             "normalization) or neither (each volume by its own statistics)")
        if self.intensity_clip is not None and not (
                self.intensity_clip[0] < self.intensity_clip[1]):
            raise ValueError(f"intensity_clip {list(self.intensity_clip)}: need low < high")
        if self.target_spacing is not None and min(self.target_spacing) <= 0:
            raise ValueError(f"target_spacing {list(self.target_spacing)}: every spacing "
                             "must be > 0 mm")
        return self


__all__ = ["GeneratedVolumesDataConfig", "VolumeAugmentConfig", "VolumeDataConfig",
           "VolumeDatasetConfig", "VolumeListDataConfig"]
