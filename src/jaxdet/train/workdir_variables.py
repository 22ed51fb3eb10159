"""The variables of a jaxdet workdir's latest checkpoint as plain arrays, whatever model it
holds: what ``train.init_checkpoint`` / ``--checkpoint`` read from another run."""

from __future__ import annotations

import os

import numpy as np
import yaml

from jaxdet.train.checkpoint import Checkpointer
from jaxdet.train.remote_workdir import checkpoints_location, readable_workdir


def latest_variables(workdir: str | os.PathLike) -> dict[str, np.ndarray]:
    """``{'/'-joined variable path: array}`` of the params and batch statistics (the EMA
    params when the run evaluated with them, its ``eval.use_ema``) of the latest intact
    checkpoint of ``workdir`` (local, or in a bucket).

    Raises:
      FileNotFoundError: no intact checkpoint there."""
    local = readable_workdir(workdir)
    where = checkpoints_location(local)  # a bucket's checkpoints are read there
    checkpointer = Checkpointer(where, read_only=True)  # another run's
    try:
        step = checkpointer.latest_intact_step()
        if step is None:
            raise FileNotFoundError(f"no intact checkpoint in {where}")
        state = checkpointer.restore_raw(step)
    finally:
        checkpointer.close()
    use_ema = True
    saved_config = local / "config.yaml"
    if saved_config.is_file():
        use_ema = bool((yaml.safe_load(saved_config.read_text()) or {}).get("eval", {})
                       .get("use_ema", True))
    params = state["ema_params"] if use_ema and state.get("ema_params") else state["params"]
    out = {}
    for tree in (params, state["batch_stats"]):
        for key, value in _flatten(tree).items():
            out[key] = np.asarray(value)
    return out


def _flatten(tree, prefix: str = "") -> dict:
    if isinstance(tree, dict):
        out = {}
        for k, v in tree.items():
            out.update(_flatten(v, f"{prefix}{k}/"))
        return out
    return {prefix.rstrip("/"): tree}


__all__ = ["latest_variables"]
