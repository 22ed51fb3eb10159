"""Checkpoints carry their files' sizes and checksums: a truncated, deleted or overwritten file
of the newest step is named, and the newest intact step is used instead; the training run sets
the damaged step aside (kept) and writes it again."""

import logging
import os
import re

import jax.numpy as jnp
import pytest

from jaxdet.train.checkpoint import Checkpointer
from jaxdet.train.checkpoint_integrity import CHECKSUMS, damage, seal


def _state(scale: float) -> dict:
    return {"w": scale * jnp.arange(4096, dtype=jnp.float32), "step": jnp.int32(scale)}


def _largest_file(step_dir):
    return max((p for p in step_dir.rglob("*") if p.is_file() and p.name != CHECKSUMS),
               key=lambda p: p.stat().st_size)


def _truncate(path):
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


def _overwrite(path):  # same size, other bytes
    with open(path, "r+b") as f:
        f.seek(path.stat().st_size // 3)
        f.write(b"\x5a" * 64)


DAMAGE = {
    "truncated": (_truncate, "bytes, .* when written"),
    "deleted": (os.remove, "is missing"),
    "overwritten": (_overwrite, "does not hold the bytes written"),
}


def test_seal_and_damage_by_hand(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.bin").write_bytes(b"x" * 1000)
    (tmp_path / "sub" / "b.json").write_text("{}")
    assert damage(tmp_path) is None  # not sealed: nothing to check against
    seal(tmp_path)
    assert damage(tmp_path) is None
    _overwrite(tmp_path / "a.bin")
    assert damage(tmp_path) == "a.bin does not hold the bytes written (CRC32C differs)"
    (tmp_path / "a.bin").write_bytes(b"x" * 10)
    assert damage(tmp_path) == "a.bin is 10 bytes, 1,000 when written"
    os.remove(tmp_path / "sub" / "b.json")
    assert damage(tmp_path) == "a.bin is 10 bytes, 1,000 when written"  # first in name order


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_a_damaged_newest_step_falls_back_and_is_set_aside(tmp_path, how, caplog):
    hurt, message = DAMAGE[how]
    ckpt = Checkpointer(tmp_path / "checkpoints", every_steps=1)
    ckpt.save(1, _state(1.0), {"n": 1})
    ckpt.save(2, _state(2.0), {"n": 2})
    ckpt.close()
    assert all((tmp_path / "checkpoints" / s / CHECKSUMS).is_file() for s in ("1", "2"))
    victim = _largest_file(tmp_path / "checkpoints" / "2")
    hurt(victim)

    ckpt = Checkpointer(tmp_path / "checkpoints", every_steps=1)
    with caplog.at_level(logging.WARNING, logger="jaxdet"):
        assert ckpt.latest_intact_step() == 1  # a reader: nothing moved
    assert f"checkpoint step 2 in {tmp_path / 'checkpoints'} is damaged: " in caplog.text
    assert re.search(message, caplog.text) and victim.name in caplog.text
    assert (tmp_path / "checkpoints" / "2").is_dir()
    assert ckpt.latest_intact_step(set_aside=True) == 1  # the training run
    assert (tmp_path / "damaged_checkpoints" / "2").is_dir()
    assert ckpt.all_steps() == [1]
    assert ckpt.save(2, _state(3.0), {"n": 3})  # the step is written again
    ckpt.close()
    ckpt = Checkpointer(tmp_path / "checkpoints")
    assert ckpt.latest_intact_step() == 2 and ckpt.read_metadata(2) == {"n": 3}
    ckpt.close()
