"""Model sections added at run time: a family defined outside jaxdet registers its own
``model:`` class, and configs with its ``model.type`` validate like the shipped ones.

Registering a family (the task registry) calls :func:`register_model_config`; the shipped families'
sections are the ``AnyModelConfig`` union of ``config.schema``.
"""

from __future__ import annotations

import typing
from typing import Annotated, Union

from pydantic import BaseModel

from jaxdet.config import schema as S

_SHIPPED = S.AnyModelConfig  # Annotated[Union[the shipped sections], Field(discriminator="type")]
_SHIPPED_ANNOTATION = S.Config.model_fields["model"].annotation
_ADDED: dict[str, type[BaseModel]] = {}


def _model_type(cls: type[BaseModel]) -> str:
    """The ``type`` literal of a model section class (its one allowed value)."""
    field = cls.model_fields.get("type")
    values = typing.get_args(field.annotation) if field is not None else ()
    if len(values) != 1 or not isinstance(values[0], str):
        raise TypeError(f"{cls.__name__} needs a field `type: Literal[\"<model type>\"]`")
    return values[0]


def _rebuild() -> None:
    """``Config.model`` as the shipped union plus the registered sections (exactly the
    shipped field again once none is left)."""
    members, discriminator = typing.get_args(_SHIPPED)
    classes = (*typing.get_args(members), *_ADDED.values())
    field = S.Config.model_fields["model"]
    field.annotation = (Annotated[Union[classes], discriminator]  # noqa: UP007
                        if _ADDED else _SHIPPED_ANNOTATION)
    S.Config.model_rebuild(force=True)


def register_model_config(cls: type[BaseModel], *, data_type: str = "images") -> str:
    """Accept ``model:`` sections of class ``cls`` (a pydantic model with ``type:
    Literal["<name>"]``) in every config validated from now on; ``data_type``: the kind of
    ``data:`` section its configs take (``images`` or ``volumes``). Returns the model type.

    Raises:
      ValueError: the type is a shipped family's or already registered."""
    name = _model_type(cls)
    shipped = {_model_type(c) for c in typing.get_args(typing.get_args(_SHIPPED)[0])}
    if name in shipped or name in _ADDED:
        raise ValueError(f"model.type {name!r} is already taken")
    _ADDED[name] = cls
    S.DATA_TYPE_OF_MODEL[name] = data_type
    _rebuild()
    return name


def unregister_model_config(name: str) -> None:
    """Undo :func:`register_model_config` for model type ``name`` (no-op if absent)."""
    if _ADDED.pop(name, None) is not None:
        S.DATA_TYPE_OF_MODEL.pop(name, None)
        _rebuild()


__all__ = ["register_model_config", "unregister_model_config"]
