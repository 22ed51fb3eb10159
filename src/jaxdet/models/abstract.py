"""Build a model abstractly (shapes and dtypes only), in time linear in its size.

``nnx.eval_shape`` traces a builder: every parameter becomes a ``jax.ShapeDtypeStruct`` and
nothing large is allocated. Traced as is, a big model builds slowly: each draw from an
``nnx.Rngs`` bumps its counter Variable, and Flax's check of the new value's sharding makes
JAX describe the traced value's origin, which walks the whole trace so far, so the build grows
with the square of the number of parameters (EfficientDet-D6: 13 s, 1.0 s without it).

Inside :func:`abstract_build` the families' builders get a key-only stand-in from
:func:`model_rngs`: every stream returns one traced key and no counter is kept. Under
tracing the key's value is never computed, so the shapes and dtypes are those of a real
build (the suite compares the two). Outside it, :func:`model_rngs` is ``nnx.Rngs(seed)``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import jax
from flax import nnx

M = TypeVar("M")

_ABSTRACT: contextvars.ContextVar[bool] = contextvars.ContextVar("jaxdet_abstract_build",
                                                                 default=False)


class _KeyOnlyRngs:
    """What builders use of ``nnx.Rngs`` (``rngs()``, ``rngs.params()``, any named stream),
    each call returning the same key: for abstract builds only, where values never exist."""

    def __init__(self, seed: int) -> None:
        self._key = jax.random.key(seed)

    def __call__(self) -> jax.Array:
        return self._key

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self


def model_rngs(seed: int) -> nnx.Rngs:
    """The random streams a family's builder draws its parameters from: ``nnx.Rngs(seed)``,
    or inside :func:`abstract_build` the key-only stand-in (same shapes, no counter)."""
    if _ABSTRACT.get():
        return _KeyOnlyRngs(seed)  # type: ignore[return-value]
    return nnx.Rngs(seed)


@contextlib.contextmanager
def _abstract() -> Iterator[None]:
    token = _ABSTRACT.set(True)
    try:
        yield
    finally:
        _ABSTRACT.reset(token)


def abstract_build(build: Callable[[], M]) -> M:
    """``nnx.eval_shape(build)``: the module ``build()`` returns, every array a
    ``jax.ShapeDtypeStruct``, with builders drawing keys from :func:`model_rngs`'s stand-in."""
    def traced() -> M:
        with _abstract():
            return build()
    return nnx.eval_shape(traced)


__all__ = ["abstract_build", "model_rngs"]
