"""A run's config fingerprint: what fixes the tensors of its checkpoints, checked before a
workdir's checkpoint is resumed or restored."""

from __future__ import annotations

import hashlib
import json

from jaxdet import tasks
from jaxdet.config.schema import Config
from jaxdet.train.checkpoint import Checkpointer


class WorkdirMismatch(RuntimeError):
    """The workdir holds checkpoints of a different model/input configuration."""


def config_fingerprint(config: Config) -> str:
    """Hash of what fixes the checkpoint's tensors: what the task family names (for the SSD
    family the network, classes, anchors and input size, see ``tasks.fingerprint_fields``),
    the optimizer's state layout and the moving average."""
    keyed = {
        **tasks.fingerprint_fields(config),
        "ema": config.train.ema_decay is not None,
        "optimizer": config.train.optimizer.name,
    }
    if config.train.optimizer.momentum_form != "optax":  # another optimizer-state layout
        keyed["momentum_form"] = config.train.optimizer.momentum_form
    frozen = [list(config.train.freeze_variables), list(config.train.update_trainable_variables)]
    if any(frozen):  # frozen parameters have no optimizer state: another tree to restore
        keyed["frozen"] = frozen
    if config.precision == "fp16":  # the loss-scale state is part of the checkpoint
        keyed["loss_scale"] = True
    return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:16]


def check_fingerprint(checkpointer: Checkpointer, step: int, config: Config, workdir) -> None:
    """Raise ``WorkdirMismatch`` unless checkpoint ``step`` was written with ``config``'s
    fingerprint (naming the setting that fits where only the momentum form differs)."""
    found = checkpointer.read_metadata(step).get("fingerprint")
    expected = config_fingerprint(config)
    if found == expected:
        return
    optimizer = config.train.optimizer
    if optimizer.momentum_form != "optax" and found == config_fingerprint(
            config.model_copy(update={"train": config.train.model_copy(update={
                "optimizer": optimizer.model_copy(update={"momentum_form": "optax"})})})):
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
