"""What changed between the config a workdir was trained with and the one resuming it.

A resumed run keeps its checkpoint's meaning (the model fingerprint refuses a different
network), but training fields may change on purpose: a longer schedule, a lower learning rate, a
bigger batch. Those are named, old and new value, in one warning; the workdir's previous
``config.yaml`` is kept beside the new one. Changes to the training data's identity
(``data.train``: which files, how many generated images) would make the saved data position
meaningless, and regenerating generated data would destroy what the checkpoint was trained on:
they are refused before anything in the workdir is touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# fields that only say how a run is carried out, not what it computes
IGNORED = ("data.worker_count", "train.log_every", "train.checkpoint_every",
           "train.eval_every", "train.keep_checkpoints", "eval.num_visualizations", "name",
           "description")


class DataChanged(ValueError):
    """``data.train`` differs from the workdir's: resuming would not replay the same data."""


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


def config_changes(old: dict, new: dict) -> dict[str, tuple[Any, Any]]:
    """``{dotted field: (old value, new value)}`` for every leaf that differs (lists compared
    whole), leaving out :data:`IGNORED`. A field only one side has counts only inside
    ``data.train`` (another source type); elsewhere it is a field a newer jaxdet added."""
    a, b = _flatten(old), _flatten(new)
    keys = (set(a) & set(b)) | {k for k in set(a) ^ set(b) if k.startswith("data.train.")}
    return {k: (a.get(k), b.get(k)) for k in sorted(keys)
            if a.get(k) != b.get(k) and not k.startswith(IGNORED)}


def _short(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    text = text.removesuffix("\n...").removesuffix("...").strip()
    return text if len(text) <= 60 else text[:57] + "..."


def describe(changes: dict[str, tuple[Any, Any]]) -> str:
    """``field old -> new, ...`` in one line."""
    return ", ".join(f"{k} {_short(a)} -> {_short(b)}" for k, (a, b) in changes.items())


def check_resume(workdir: Path, new: dict) -> dict[str, tuple[Any, Any]]:
    """The changes from ``workdir/config.yaml`` to ``new`` (a config dumped as a dict; empty
    when the workdir has no config.yaml). Raises :class:`DataChanged` when ``data.train``
    changed."""
    saved = workdir / "config.yaml"
    if not saved.is_file():
        return {}
    old = yaml.safe_load(saved.read_text()) or {}
    changes = config_changes(old, new)
    data = {k: v for k, v in changes.items() if k.startswith("data.train.")}
    if data:
        raise DataChanged(
            f"{workdir} was trained on other data: {describe(data)}; resuming would not replay "
            "the same data (and would regenerate generated data). Put the old values back "
            "(see its config.yaml) or train in a new --workdir")
    return changes


def batch_change_warning(changes: dict[str, tuple[Any, Any]], reference_batch_size: int | None
                         ) -> str | None:
    """The warning for a resume whose global batch (``train.batch_size``) changed, from
    :func:`check_resume`'s ``changes``; None when it did not change."""
    if "train.batch_size" not in changes:
        return None
    old, new = changes["train.batch_size"]
    if reference_batch_size is None:
        rate = ("the learning rate stays as configured; set train.reference_batch_size to "
                "scale it with the batch (the linear scaling rule)")
    else:
        rate = (f"the learning rate now scales by {new}/{reference_batch_size} (it scaled by "
                f"{old}/{reference_batch_size}): train.reference_batch_size")
    return (f"the global batch changed from {old} to {new} on resume: the steps already "
            f"trained saw {old} images each, the rest will see {new}; {rate}")


def keep_previous(workdir: Path) -> Path | None:
    """Rename ``workdir/config.yaml`` to the first free ``config.yaml.N``; returns the new
    path (None: there was none)."""
    saved = workdir / "config.yaml"
    if not saved.is_file():
        return None
    n = 1
    while (workdir / f"config.yaml.{n}").exists():
        n += 1
    target = workdir / f"config.yaml.{n}"
    saved.rename(target)
    return target


__all__ = ["DataChanged", "batch_change_warning", "check_resume", "config_changes", "describe",
           "keep_previous"]
