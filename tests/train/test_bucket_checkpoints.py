"""Checkpoints written by orbax straight into a bucket (the GCS emulator): sealed from the
store's own checksums, a damaged step found without reading it and set aside in the bucket,
the step before it restored."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxdet import files
from jaxdet.train.checkpoint import Checkpointer
from jaxdet.train.checkpoint_integrity import damage


def test_a_step_changed_in_the_bucket_is_set_aside_and_the_one_before_restores(gcs):
    url = f"gs://{gcs.bucket}/ckpt/run/checkpoints"
    with Checkpointer(url, keep=3, every_steps=1) as ckpt:
        for step in (1, 2):
            ckpt.save(step, {"w": jnp.full((4,), float(step))}, {"step": step})
    assert files.isfile(f"{url}/2/jaxdet_checksums.json") and damage(f"{url}/2") is None
    # another program rewrites one object of step 2 (same size, other bytes)
    victim = next(p for p in files.glob(f"{url}/2/**", files_only=True)
                  if p.endswith("_CHECKPOINT_METADATA"))
    data = files.read_bytes(victim)
    files.write_bytes(victim, data.replace(b"{", b"[", 1))
    assert damage(f"{url}/2") == ("_CHECKPOINT_METADATA does not hold the bytes written "
                                  "(CRC32C differs)")
    with Checkpointer(url, keep=3, every_steps=1) as ckpt:
        assert ckpt.latest_intact_step(set_aside=True) == 1
        assert ckpt.all_steps() == [1]
        state, meta = ckpt.restore(1, {"w": jnp.zeros((4,))})
    np.testing.assert_array_equal(state["w"], np.ones(4))
    assert meta == {"step": 1}
    aside = f"gs://{gcs.bucket}/ckpt/run/damaged_checkpoints/2"
    assert files.isfile(f"{aside}/jaxdet_checksums.json")
