"""Checkpoints: an orbax ``CheckpointManager`` holding the train state and JSON metadata.

Each step directory holds two items: ``state`` (any pytree of arrays, saved sharded and
asynchronously) and ``metadata`` (a JSON dict: config fingerprint, data-iterator state,
...). Orbax writes a step into a temporary directory and renames it when complete, so a
run killed mid-save never leaves a half-written checkpoint as the latest one; leftover
temporary directories are removed when the next ``Checkpointer`` opens the directory. Once a
step is complete, process 0 records its files' sizes and checksums in it
(``train.checkpoint_integrity``); :meth:`Checkpointer.latest_intact_step` skips a step damaged
since.

``directory`` may be a bucket URL (``gs://bucket/run/checkpoints``): orbax writes there
directly through tensorstore, every process its own part, and marks a finished step with its
``commit_success.txt`` instead of a rename; a step without it is never listed, and the next
writer removes it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers as policies

from jaxdet import files
from jaxdet.train.checkpoint_integrity import damage, seal

_STATE, _METADATA = "state", "metadata"
log = logging.getLogger("jaxdet")


def _with_default_sharding(abstract_state: Any) -> Any:
    """Give leaves without a sharding (plain ``jax.eval_shape`` output) one on this process's
    first device (each process restores its own full copy)."""
    default = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])

    def fix(leaf):
        if isinstance(leaf, jax.ShapeDtypeStruct) and getattr(leaf, "sharding", None) is None:
            return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=default)
        if isinstance(leaf, jax.Array):
            return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=leaf.sharding)
        return leaf

    return jax.tree.map(fix, abstract_state)


class WorkdirMismatch(RuntimeError):
    """The workdir holds checkpoints of a different model/input configuration."""


class Checkpointer:
    """Save every ``every_steps`` steps, keep the last ``keep``, restore to given shardings.

    Every JAX process must call ``save``/``restore`` (orbax coordinates the hosts).
    ``read_only``: a reader beside a training run that may be writing (evaluation,
    prediction): it creates nothing and leaves the run's unfinished saves (orbax's temporary
    folders) alone; ``save`` refuses.
    """

    def __init__(self, directory: str | Path, *, keep: int = 3, every_steps: int = 1000,
                 async_save: bool = True, read_only: bool = False):
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}.")
        if every_steps < 1:
            raise ValueError(f"every_steps must be >= 1, got {every_steps}.")
        self.remote = files.is_url(directory)
        if self.remote:  # the store's client loads here, not first in orbax's threads
            files.paths.filesystem(os.fspath(directory))
        # a local folder as a Path; a bucket folder as its URL (str)
        self.directory: Path | str = (os.fspath(directory).rstrip("/") if self.remote
                                      else Path(directory).absolute())
        self.every_steps = int(every_steps)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=int(keep),
            # preemption: the training loop's own signal handling (``train.preemption``)
            # forces a save at the step every process agreed on
            save_decision_policy=policies.FixedIntervalPolicy(self.every_steps),
            create=not read_only,
            cleanup_tmp_directories=not read_only,
            enable_async_checkpointing=async_save,
        )
        # handlers named up front (not only item names), so a fresh manager can read a
        # step's metadata before restoring anything (``restore_parts``)
        self._unsealed: list[int] = []
        self.read_only = read_only
        # called (process 0) after the steps saved so far are complete and sealed
        self.on_sealed: Callable[[], None] | None = None
        self._manager = ocp.CheckpointManager(
            self.directory, options=options,  # a URL as a str: orbax reads it as a path
            item_handlers={_STATE: ocp.StandardCheckpointHandler(),
                           _METADATA: ocp.JsonCheckpointHandler()},
        )

    def save(self, step: int, state: Any, metadata: dict | None = None, *,
             force: bool = False) -> bool:
        """Save ``state`` and ``metadata`` at ``step`` if due (or ``force``); True if saved.

        Not due: ``step % every_steps != 0``, or ``step`` is not newer than the latest
        checkpoint. The save runs in the background; call ``wait()`` before reading it.
        """
        if self.read_only:
            raise RuntimeError(f"{self.directory} was opened read-only: nothing is saved")
        step = int(step)
        if step in self._manager.all_steps():
            return False
        self._seal_written()
        args = ocp.args.Composite(**{
            _STATE: ocp.args.StandardSave(state),
            _METADATA: ocp.args.JsonSave(dict(metadata or {})),
        })
        saved = bool(self._manager.save(step, args=args, force=force))
        if saved:
            self._unsealed.append(step)
        return saved

    def step_dir(self, step: int) -> Path | str:
        """The folder of ``step`` (a URL for a checkpoint folder in a bucket)."""
        if self.remote:
            return files.join(self.directory, str(int(step)))
        return self.directory / str(int(step))

    @property
    def workdir(self) -> Path | str:
        """The folder holding this checkpoint folder."""
        return files.parent(self.directory) if self.remote else self.directory.parent

    def _seal_written(self) -> None:
        """Checksum the steps this instance saved, once orbax has finished them (process 0;
        the others' parts are in the same folders)."""
        if not self._unsealed:
            return
        self._manager.wait_until_finished()
        if jax.process_index() == 0:
            if self.remote:  # orbax wrote through tensorstore, not the listing's client
                files.paths.forget_listings(self.directory)
            for step in self._unsealed:
                if files.isdir(self.step_dir(step)):  # (not already rotated out by ``keep``)
                    seal(self.step_dir(step))
            if self.on_sealed is not None:  # e.g. copy the sealed steps to a remote workdir
                self.on_sealed()
        self._unsealed.clear()

    def latest_intact_step(self, *, set_aside: bool = False) -> int | None:
        """The newest step whose files are as written (None: no intact checkpoint). Each
        damaged newer step is named in one warning; with ``set_aside`` (the training run, which
        owns the workdir) it is moved to ``damaged_checkpoints/`` beside this directory, kept,
        so that its step can be written again."""
        found, moved = None, False
        if self.remote:
            files.paths.forget_listings(self.directory)
        for step in sorted(self._manager.all_steps(), reverse=True):
            why = damage(self.step_dir(step))
            if why is None:
                found = int(step)
                break
            where = ""
            if set_aside and jax.process_index() == 0:
                aside = files.join(self.workdir, "damaged_checkpoints")
                target, n = files.join(aside, str(step)), 1
                while files.exists(target):
                    n += 1
                    target = files.join(aside, f"{step}_{n}")
                files.move(self.step_dir(step), target)
                where, moved = f"; moved to {target} (kept)", True
            log.warning("checkpoint step %d in %s is damaged: %s%s; using an older one",
                        step, self.directory, why, where)
        if moved:
            self._manager.reload()
        return found

    def all_steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def reload(self) -> list[int]:
        """Read the folder again (a reader sees the steps a training run saved since) and
        return :meth:`all_steps`."""
        self._manager.reload()
        return self.all_steps()

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def read_metadata(self, step: int) -> dict:
        """The JSON metadata saved with ``step``, without touching the (large) state."""
        restored = self._manager.restore(
            int(step), args=ocp.args.Composite(**{_METADATA: ocp.args.JsonRestore()})
        )
        return dict(restored[_METADATA] or {})

    def check_fingerprint(self, step: int, expected: str, *, former: dict[str, str] | None = None,
                          workdir: str | os.PathLike | None = None) -> None:
        """Raise :class:`WorkdirMismatch` unless checkpoint ``step`` was written with the config
        fingerprint ``expected`` (``tasks.Family.checkpoint_fingerprint``). ``former``:
        ``{fingerprint: advice}`` of the same config under earlier defaults, whose advice the
        error gives instead; ``workdir``: what the error names (default: the folder holding
        ``checkpoints/``)."""
        found = self.read_metadata(step).get("fingerprint")
        if found == expected:
            return
        workdir = self.workdir if workdir is None else workdir
        if found in (former or {}):
            raise WorkdirMismatch(f"{workdir}: {former[found]}. Nothing was overwritten.")
        raise WorkdirMismatch(
            f"{workdir} holds checkpoints of a different model, input size or optimizer "
            f"(config fingerprint {found} != {expected}); use another --workdir. "
            "Nothing was overwritten.")

    def restore(self, step: int | None, abstract_state: Any) -> tuple[Any, dict]:
        """Restore ``(state, metadata)`` from ``step`` (``None``: the latest).

        ``abstract_state`` is a pytree of ``jax.ShapeDtypeStruct`` (e.g. from
        ``jax.eval_shape``) or arrays; each leaf is restored with its dtype and sharding
        (leaves without one go to the first device).
        """
        if step is None:
            step = self.latest_step()
            if step is None:
                raise FileNotFoundError(f"no checkpoint to restore in {self.directory}.")
        elif int(step) not in self._manager.all_steps():
            raise FileNotFoundError(
                f"no checkpoint for step {step} in {self.directory}; "
                f"available: {self.all_steps()}."
            )
        restored = self._manager.restore(
            int(step),
            args=ocp.args.Composite(**{
                _STATE: ocp.args.StandardRestore(_with_default_sharding(abstract_state)),
                _METADATA: ocp.args.JsonRestore(),
            }),
        )
        return restored[_STATE], dict(restored[_METADATA] or {})

    def restore_parts(self, step: int, parts: dict[str, Any]) -> dict[str, Any]:
        """Restore some top-level entries of the state of ``step`` (e.g. ``params`` and
        ``batch_stats`` for inference), each to its abstract tree in ``parts``, without knowing
        how the others (the optimizer's state) are laid out: they are read as their metadata
        describes them and dropped. Returns ``{name: restored tree}`` for the names in
        ``parts``."""
        saved = self._manager.item_metadata(int(step))[_STATE].tree
        missing = [name for name in parts if name not in saved]
        if missing:
            raise KeyError(f"{self.directory}: the checkpoint of step {step} has no "
                           f"{', '.join(missing)} (it has {', '.join(saved)})")
        target = {name: parts[name] if name in parts else jax.tree.map(
            lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype), tree)
            for name, tree in saved.items()}
        restored = self._manager.restore(
            int(step), args=ocp.args.Composite(**{
                _STATE: ocp.args.StandardRestore(_with_default_sharding(target))}))
        return {name: restored[_STATE][name] for name in parts}

    def restore_raw(self, step: int) -> Any:
        """The state of ``step`` as saved (numpy arrays on the host), without a target tree:
        for reading the weights of another model's checkpoint."""
        restored = self._manager.restore(
            int(step), args=ocp.args.Composite(**{_STATE: ocp.args.StandardRestore()}))
        return jax.tree.map(lambda x: jax.device_get(x), restored[_STATE])

    def wait(self) -> None:
        """Block until background saves have finished (and checksum them)."""
        self._manager.wait_until_finished()
        self._seal_written()

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._seal_written()
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["Checkpointer", "WorkdirMismatch"]
