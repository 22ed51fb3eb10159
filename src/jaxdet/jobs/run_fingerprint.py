"""A run's config fingerprint: what fixes the tensors of its checkpoints, checked before a
workdir's checkpoint is resumed or restored."""

from __future__ import annotations

from jaxdet.config.schema import Config
from jaxdet.tasks import Family, resolve
from jaxdet.train.checkpoint import Checkpointer, WorkdirMismatch


def config_fingerprint(family: Family | Config) -> str:
    """The checkpoint fingerprint of a job's config (``family``: its resolved family, or the
    config): :meth:`tasks.Family.checkpoint_fingerprint`."""
    return resolve(family).checkpoint_fingerprint()


def check_fingerprint(checkpointer: Checkpointer, step: int, family: Family, workdir) -> None:
    """Raise ``WorkdirMismatch`` unless checkpoint ``step`` was written with the fingerprint
    of ``family``'s config (naming the setting that fits where it matches the config under
    earlier defaults: :meth:`tasks.Family.former_fingerprints`)."""
    checkpointer.check_fingerprint(step, family.checkpoint_fingerprint(),
                                   former=family.former_fingerprints(), workdir=workdir)


__all__ = ["WorkdirMismatch", "check_fingerprint", "config_fingerprint"]
