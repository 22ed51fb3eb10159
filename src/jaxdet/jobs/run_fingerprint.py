"""A run's config fingerprint: what fixes the tensors of its checkpoints, checked before a
workdir's checkpoint is resumed or restored."""

from __future__ import annotations

from jaxdet.config.schema import Config
from jaxdet.tasks import Family, resolve
from jaxdet.train.checkpoint import Checkpointer


class WorkdirMismatch(RuntimeError):
    """The workdir holds checkpoints of a different model/input configuration."""


def config_fingerprint(family: Family | Config) -> str:
    """The checkpoint fingerprint of a job's config (``family``: its resolved family, or the
    config): :meth:`tasks.Family.checkpoint_fingerprint`."""
    return resolve(family).checkpoint_fingerprint()


def check_fingerprint(checkpointer: Checkpointer, step: int, family: Family, workdir) -> None:
    """Raise ``WorkdirMismatch`` unless checkpoint ``step`` was written with the fingerprint
    of ``family``'s config (naming the setting that fits where only the momentum form
    differs)."""
    found = checkpointer.read_metadata(step).get("fingerprint")
    expected = family.checkpoint_fingerprint()
    config = family.config
    if found == expected:
        return
    optimizer = config.train.optimizer
    as_optax = config.model_copy(update={"train": config.train.model_copy(update={
        "optimizer": optimizer.model_copy(update={"momentum_form": "optax"})})})
    if optimizer.momentum_form != "optax" and found == family.with_config(
            as_optax).checkpoint_fingerprint():
        raise WorkdirMismatch(
            f"{workdir} was trained with train.optimizer.momentum_form optax (the form of "
            "jaxdet's configs before they kept TF's); add --set "
            "train.optimizer.momentum_form=optax to continue or evaluate it. Nothing was "
            "overwritten."
        )
    raise WorkdirMismatch(
        f"{workdir} holds checkpoints of a different model, input size or optimizer "
        f"(config fingerprint {found} != {expected}); use another --workdir. "
        "Nothing was overwritten."
    )
