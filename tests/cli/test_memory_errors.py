"""A program too large for the device's memory is named as such in one line, with what to
lower; it is not taken for a full disk (XLA and orbax both say RESOURCE_EXHAUSTED)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdet.cli import errors
from jaxdet.cli.main import main
from jaxdet.jobs import runs


def _allocate_two_tib(*args, **kwargs):
    """A real XLA allocation failure: a 2 TiB array, refused at once by the CPU backend."""
    jax.jit(lambda: jnp.zeros((2**41,), jnp.uint8))().block_until_ready()


def test_an_out_of_memory_step_is_named_with_what_to_lower(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runs, "train", _allocate_two_tib)
    assert main(["train", "--config", "shapes_demo", "--workdir", str(tmp_path / "run"),
                 "--no-progress"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("error: out of memory: a program of this run needs 2048.0 GiB")
    assert "train.batch_size" in lines[-1] and "disk" not in lines[-1]


def test_a_full_disk_is_still_a_full_disk():
    full = RuntimeError('RESOURCE_EXHAUSTED: No space left on device writing '
                        '"/runs/a/checkpoints/40.orbax-checkpoint-tmp-1/x"')
    assert errors.out_of_memory_line(full) is None
    assert errors.disk_full_line(full).startswith(
        "the disk is full writing checkpoint step 40 in /runs/a/checkpoints")
