"""The base class of every config section."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# A field added after workdirs were written, whose default builds the network as before: the
# checkpoint fingerprint leaves it out while it has its default, so those workdirs still resume.
_LATER = {"fingerprint": "when_set"}


# How an image is resized (``data.resample``): Pillow's antialiased bilinear or TF v1's.
ResizeMethod = Literal["bilinear", "tf_bilinear"]


def later_field(default: Any, **kwargs: Any) -> Any:
    """A field with ``default`` that the checkpoint fingerprint ignores while it is at its
    default (see :func:`fingerprint_dump`); every field added to a section the fingerprint
    covers should be one."""
    return Field(default, json_schema_extra=_LATER, **kwargs)


class Strict(BaseModel):
    """Base for all config sections: unknown fields are rejected, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class BatchNormConfig(Strict):
    """BatchNorm hyper-parameters (TF OD API: decay, epsilon, train). ``epsilon`` 0 is
    torchvision's frozen backbone norms with its COCO RetinaNet / Faster R-CNN weights
    (``overwrite_eps(model, 0.0)``); only sensible with ``frozen: true``."""

    decay: float = Field(0.997, gt=0.0, lt=1.0)
    epsilon: float = Field(1e-3, ge=0.0)
    frozen: bool = False


def fingerprint_dump(section: BaseModel) -> dict:
    """``section.model_dump(mode="json")`` without the :func:`later_field` fields that hold their
    default, at any depth (what the checkpoint fingerprint hashes)."""
    out = section.model_dump(mode="json")
    _drop_later_defaults(section, out)
    return out


def _drop_later_defaults(section: BaseModel, dumped: dict) -> None:
    for name, info in type(section).model_fields.items():
        value = getattr(section, name)
        if info.json_schema_extra == _LATER and value == info.default:
            dumped.pop(name, None)
        elif isinstance(value, BaseModel) and isinstance(dumped.get(name), dict):
            _drop_later_defaults(value, dumped[name])
