"""Field-level differences between two configs (as dumped dicts)."""

from __future__ import annotations

import math
from typing import Any


def differences(a: Any, b: Any, *, labels: tuple[str, str] = ("a", "b"),
                prefix: str = "") -> list[str]:
    """``"path.to.field: <labels[0]> x != <labels[1]> y"`` for every leaf where ``a`` and
    ``b`` differ, recursing into dicts and equal-length lists; floats equal within 1e-6
    relative count as equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b))
                for d in differences(a.get(k), b.get(k), labels=labels,
                                     prefix=f"{prefix}{k}.")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, labels=labels, prefix=f"{prefix}{i}.")]
    if isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=1e-6):
        return []
    return [] if a == b else [f"{prefix[:-1]}: {labels[0]} {a!r} != {labels[1]} {b!r}"]


__all__ = ["differences"]
