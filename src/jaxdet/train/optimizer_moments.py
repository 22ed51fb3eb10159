"""An optimizer state carried over from another framework's run: its step count and moments
(TF2 Keras optimizer slots) put into the optax state jaxdet's optimizer builds.

    opt_state = with_moments(tx.init(params), step=600, moments={"momentum": velocity})

The moments are trees shaped like the parameters. Which optax state holds which slot of TF2's
Keras optimizers (the TF OD API's): the Keras-form momentum's ``trace`` is Keras's
``momentum`` slot (both the velocity ``v = m v - lr g``, the update itself); Adam's ``mu`` /
``nu`` are Keras's ``m`` / ``v``; RMSprop's ``nu`` its ``rms``. Every step counter (the
schedule's, Adam's bias correction) becomes ``step``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax

# optax state type -> {its field: the TF2 Keras slot that fills it}
SLOT_FIELDS: dict[type, dict[str, str]] = {
    optax.TraceState: {"trace": "momentum"},
    optax.ScaleByAdamState: {"mu": "m", "nu": "v"},
    optax.ScaleByRmsState: {"nu": "rms"},
}


def _moment_states(node: Any) -> Iterator[Any]:
    """The optax states in ``node`` (an optimizer state) that hold moments (:data:`SLOT_FIELDS`),
    in order."""
    if type(node) in SLOT_FIELDS:
        yield node
    elif isinstance(node, tuple):
        for item in node:
            yield from _moment_states(item)
    elif isinstance(node, Mapping):
        for item in node.values():
            yield from _moment_states(item)


def slots_needed(opt_state: Any) -> list[str]:
    """The TF2 Keras slot names ``opt_state``'s moments come from, in order (``[]`` for plain
    SGD)."""
    return list(moments_of(opt_state))


def moments_of(opt_state: Any) -> dict[str, Any]:
    """The moments in ``opt_state`` by the TF2 Keras slot name that holds them (what
    :func:`with_moments` puts in): ``{slot: tree shaped like the parameters}``, the first
    of each slot, in order; ``{}`` for plain SGD."""
    found: dict[str, Any] = {}
    for state in _moment_states(opt_state):
        for name, slot in SLOT_FIELDS[type(state)].items():
            found.setdefault(slot, getattr(state, name))
    return found


def with_moments(opt_state: Any, step: int, moments: Mapping[str, Any]) -> Any:
    """``opt_state`` with every step counter set to ``step`` and each moment replaced by
    ``moments[slot]`` (see the module docstring; each a tree shaped as the moment it
    replaces). Raises ValueError for a missing slot or a tree of another shape (e.g. an
    optimizer that trains a part of the parameters only)."""

    def replace(node: Any) -> Any:
        fields = SLOT_FIELDS.get(type(node))
        if fields is not None:
            updates = {name: _same_shape(getattr(node, name), moments, slot)
                       for name, slot in fields.items()}
            if "count" in node._fields:
                updates["count"] = _count(node.count, step)
            return node._replace(**updates)
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            updates = {name: replace(getattr(node, name)) for name in node._fields}
            if "count" in updates:
                updates["count"] = _count(node.count, step)
            return node._replace(**updates)
        if isinstance(node, tuple):
            return type(node)(replace(item) for item in node)
        if isinstance(node, Mapping):
            return type(node)({key: replace(item) for key, item in node.items()})
        return node

    return replace(opt_state)


def _count(old: Any, step: int) -> Any:
    return jnp.full(jnp.shape(old), step, jnp.asarray(old).dtype)


def _same_shape(old: Any, moments: Mapping[str, Any], slot: str) -> Any:
    if slot not in moments:
        raise ValueError(f"the optimizer needs the '{slot}' slots, which were not given")
    new = moments[slot]
    if jax.tree.structure(old) != jax.tree.structure(new):
        raise ValueError(f"the '{slot}' slots do not have the optimizer state's layout (an "
                         "optimizer that trains part of the parameters only: freeze_variables)")
    return jax.tree.map(lambda o, n: jnp.asarray(n, jnp.asarray(o).dtype).reshape(o.shape),
                        old, new)


__all__ = ["SLOT_FIELDS", "moments_of", "slots_needed", "with_moments"]
