"""Checkpointer: round trip, pruning, metadata, atomic latest step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet.train.checkpoint import Checkpointer


def _state(scale=1.0):
    return {
        "step": jnp.asarray(7, jnp.int32),
        "params": {
            "conv": {"kernel": scale * jnp.arange(24, dtype=jnp.float32).reshape(2, 3, 4),
                     "bias": jnp.asarray([0.5, -1.5, 2.25], jnp.bfloat16)},
        },
        "opt": {"count": jnp.asarray(3, jnp.int32), "mu": [jnp.arange(8.0), jnp.ones((2, 2))]},
    }


METADATA = {"config_sha256": "abc123", "data": {"epoch": 2, "position": [1, 2, 3]},
            "note": "ünïcode"}


def _assert_tree_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(np.asarray(x, np.float32), np.asarray(y, np.float32))


def test_empty_directory(tmp_path):
    ckpt = Checkpointer(tmp_path / "ckpt")
    assert ckpt.latest_step() is None
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        ckpt.restore(None, jax.eval_shape(_state))
    ckpt.close()


def test_round_trip_with_metadata(tmp_path):
    state = _state()
    with Checkpointer(tmp_path, every_steps=10) as ckpt:
        assert ckpt.save(10, state, METADATA)
        ckpt.wait()
        assert ckpt.latest_step() == 10
        restored, metadata = ckpt.restore(None, jax.eval_shape(_state))
    _assert_tree_equal(restored, state)
    assert restored["params"]["conv"]["bias"].dtype == jnp.bfloat16
    assert metadata == METADATA
    # a fresh Checkpointer (a resumed run) sees the same checkpoint
    with Checkpointer(tmp_path, every_steps=10) as ckpt:
        assert ckpt.latest_step() == 10
        restored, metadata = ckpt.restore(10, jax.eval_shape(_state))
    _assert_tree_equal(restored, state)
    assert metadata == METADATA


def test_restore_uses_requested_shardings(tmp_path):
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    n = mesh.devices.size

    def sharding(x):  # split the leading axis over all devices where it divides
        spec = ("data",) if x.ndim and x.shape[0] % n == 0 else ()
        return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))

    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding(x)),
        jax.eval_shape(_state),
    )
    with Checkpointer(tmp_path, every_steps=1) as ckpt:
        ckpt.save(1, _state(), {})
        ckpt.wait()
        restored, _ = ckpt.restore(1, abstract)
    _assert_tree_equal(restored, _state())
    for leaf, want in zip(jax.tree.leaves(restored), jax.tree.leaves(abstract), strict=True):
        assert leaf.sharding == want.sharding


def test_save_interval_force_and_keep_last(tmp_path):
    with Checkpointer(tmp_path, keep=2, every_steps=10) as ckpt:
        assert not ckpt.save(5, _state(), {})  # not due
        assert ckpt.save(10, _state(1.0), {"step": 10})
        assert ckpt.save(15, _state(1.5), {"step": 15}, force=True)
        assert not ckpt.save(15, _state(), {}, force=True)  # already saved
        assert ckpt.save(20, _state(2.0), {"step": 20})
        assert ckpt.save(30, _state(3.0), {"step": 30})
        ckpt.wait()
        assert ckpt.all_steps() == [20, 30]
        assert ckpt.latest_step() == 30
        restored, metadata = ckpt.restore(20, jax.eval_shape(_state))
        assert metadata == {"step": 20}
        _assert_tree_equal(restored, _state(2.0))
        with pytest.raises(FileNotFoundError, match="available: \\[20, 30\\]"):
            ckpt.restore(10, jax.eval_shape(_state))


def test_half_written_checkpoint_is_never_latest(tmp_path):
    with Checkpointer(tmp_path, every_steps=10) as ckpt:
        ckpt.save(10, _state(), {})
    # what a run killed while writing step 20 leaves behind: orbax's temporary directory
    partial = tmp_path / "20.orbax-checkpoint-tmp-1234567890"
    (partial / "state").mkdir(parents=True)
    (partial / "state" / "garbage").write_bytes(b"\0" * 10)
    with Checkpointer(tmp_path, every_steps=10) as ckpt:
        assert ckpt.latest_step() == 10
        assert ckpt.all_steps() == [10]
        _, metadata = ckpt.restore(None, jax.eval_shape(_state))
        assert metadata == {}
        # the resumed run writes step 20 over the leftovers
        assert ckpt.save(20, _state(2.0), {"step": 20})
        ckpt.wait()
        assert not partial.exists()
        restored, metadata = ckpt.restore(None, jax.eval_shape(_state))
    assert metadata == {"step": 20}
    _assert_tree_equal(restored, _state(2.0))


def test_async_save_survives_donation(tmp_path):
    """The next (donated) train step may free the arrays as soon as save() returns."""
    state = _state(3.0)
    with Checkpointer(tmp_path, every_steps=1) as ckpt:
        assert ckpt.save(1, state, {"a": 1})
        for leaf in jax.tree.leaves(state):
            leaf.delete()
        ckpt.wait()
        restored, metadata = ckpt.restore(1, jax.eval_shape(_state))
    _assert_tree_equal(restored, _state(3.0))
    assert metadata == {"a": 1}
