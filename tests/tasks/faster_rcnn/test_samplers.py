"""The static balanced positive / negative sampler: exact counts in hand-computed cases, never
outside the indicator, every allowed subset reachable and roughly uniform, deterministic per key,
jit == eager, batched == per image; and equal to the TF OD API's static sampler where TF's result
does not depend on its random draw (fixture tests/core/fixtures/roi_ops_tf.npz, made by
TensorFlow)."""

from __future__ import annotations

import itertools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet.tasks.faster_rcnn.samplers import balanced_sample, batch_balanced_sample

FIXTURE = Path(__file__).parents[2] / "core" / "fixtures" / "roi_ops_tf.npz"


@pytest.fixture(scope="module")
def tf_out():
    if not FIXTURE.exists():
        pytest.skip(f"{FIXTURE.name} missing (make it with tests/core/fixtures/make_roi_ops_tf.py)")
    return dict(np.load(FIXTURE))


def _many(indicator, labels, sample_size, fraction, num_keys=64, seed=0):
    keys = jax.random.split(jax.random.key(seed), num_keys)
    fn = jax.jit(jax.vmap(lambda k: balanced_sample(indicator, labels, sample_size, fraction, k)))
    return np.asarray(fn(keys))


def _case(n, positives, indicated=None):
    labels = np.zeros(n, bool)
    labels[list(positives)] = True
    indicator = np.ones(n, bool) if indicated is None else np.isin(np.arange(n), indicated)
    return jnp.asarray(indicator), jnp.asarray(labels)


# (n, positives, indicated, sample_size, fraction) -> (#positives, #negatives) sampled
HAND = [
    ((20, range(5), None, 8, 0.5), (4, 4)),           # plenty of both
    ((20, range(2), None, 8, 0.5), (2, 6)),           # few positives: negatives fill up
    ((12, range(10), None, 8, 0.5), (4, 2)),          # few negatives: not made up
    ((20, range(5), None, 0, 0.5), (0, 0)),           # empty sample
    ((20, range(5), None, 8, 0.0), (0, 8)),           # no positives allowed
    ((20, range(5), None, 8, 1.0), (5, 3)),           # all positives, then negatives
    ((20, range(5), None, 7, 0.5), (3, 4)),           # floor(3.5) = 3 positives
    ((20, range(0, 20, 2), range(6), 16, 0.5), (3, 3)),  # fewer indicated than the size
    ((30, range(8), range(0, 30, 2), 10, 0.25), (2, 8)),  # non-indicated positives unused
]


@pytest.mark.parametrize("case,want", HAND)
def test_counts_by_hand_and_never_outside_indicator(case, want):
    n, positives, indicated, size, fraction = case
    indicator, labels = _case(n, positives, indicated)
    samples = _many(indicator, labels, size, fraction)
    ind, lab = np.asarray(indicator), np.asarray(labels)
    assert not np.any(samples & ~ind)
    np.testing.assert_array_equal((samples & lab).sum(1), want[0])
    np.testing.assert_array_equal((samples & ~lab).sum(1), want[1])


def test_random_cases_keep_the_rules():
    rng = np.random.default_rng(0)
    for size, fraction in [(0, 0.3), (13, 0.37), (40, 0.9)]:
        ind, lab = rng.uniform(size=64) < 0.7, rng.uniform(size=64) < 0.2
        samples = _many(jnp.asarray(ind), jnp.asarray(lab), size, fraction, num_keys=16)
        num_pos = min(int(size * fraction), int((ind & lab).sum()))
        num_neg = min(size - num_pos, int((ind & ~lab).sum()))
        assert not np.any(samples & ~ind)
        assert np.all((samples & lab).sum(1) == num_pos)
        assert np.all((samples & ~lab).sum(1) == num_neg)


def test_every_allowed_subset_is_reachable_and_roughly_uniform():
    # positives 0..2, negatives 3..5, non-indicated 6 (positive) and 7 (negative); size 2, half
    # positive: one of 3 positives x one of 3 negatives = 9 equally likely subsets.
    indicator, labels = _case(8, [0, 1, 2, 6], range(6))
    samples = _many(indicator, labels, 2, 0.5, num_keys=900, seed=1)
    seen = {}
    for s in samples:
        key = tuple(np.flatnonzero(s))
        seen[key] = seen.get(key, 0) + 1
    assert set(seen) == set(itertools.product(range(3), range(3, 6)))
    assert min(seen.values()) > 60 and max(seen.values()) < 140  # expected 100 each


def test_deterministic_per_key_and_jit_equals_eager():
    rng = np.random.default_rng(4)
    ind, lab = jnp.asarray(rng.uniform(size=50) < 0.8), jnp.asarray(rng.uniform(size=50) < 0.3)
    key = jax.random.key(7)
    a = balanced_sample(ind, lab, 12, 0.25, key)  # eager: op by op
    b = balanced_sample(ind, lab, 12, 0.25, key)
    jitted = jax.jit(balanced_sample, static_argnums=(2, 3))(ind, lab, 12, 0.25, key)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, jitted)
    other = balanced_sample(ind, lab, 12, 0.25, jax.random.key(8))
    assert not np.array_equal(a, other)
    # legacy uint32 keys work too
    assert balanced_sample(ind, lab, 12, 0.25, jax.random.PRNGKey(0)).shape == (50,)


def test_batched_equals_per_image():
    rng = np.random.default_rng(5)
    ind, lab = rng.uniform(size=(3, 40)) < 0.8, rng.uniform(size=(3, 40)) < 0.3
    key = jax.random.key(3)
    got = jax.jit(batch_balanced_sample, static_argnums=(2, 3))(ind, lab, 10, 0.5, key)
    keys = jax.random.split(key, 3)
    for b in range(3):
        np.testing.assert_array_equal(got[b], balanced_sample(ind[b], lab[b], 10, 0.5, keys[b]))


def test_bad_arguments_raise():
    ind = jnp.ones(4, bool)
    with pytest.raises(ValueError, match="positive_fraction"):
        balanced_sample(ind, ind, 2, 1.5, jax.random.key(0))
    with pytest.raises(ValueError, match="sample_size"):
        balanced_sample(ind, ind, -1, 0.5, jax.random.key(0))
    with pytest.raises(ValueError, match=r"\[N\]"):
        balanced_sample(ind[None], ind[None], 2, 0.5, jax.random.key(0))
    with pytest.raises(ValueError, match=r"\[B, N\]"):
        batch_balanced_sample(ind, ind, 2, 0.5, jax.random.key(0))


def test_equals_tf_static_sampler_where_tf_is_deterministic(tf_out):
    key = jax.random.key(0)
    # (a) all indicated, fewer than the sample size: everything is sampled
    got = balanced_sample(tf_out["smp_a_ind"], tf_out["smp_a_lab"], 16, 0.5, key)
    np.testing.assert_array_equal(got, tf_out["smp_a"])
    assert tf_out["smp_a"].all()
    # (b) exactly the allowed 2 positives and 6 negatives indicated: exactly the indicator
    got = balanced_sample(tf_out["smp_b_ind"], tf_out["smp_b_lab"], 8, 0.25, key)
    np.testing.assert_array_equal(got, tf_out["smp_b"])
    np.testing.assert_array_equal(got, tf_out["smp_b_ind"])


def test_tf_static_sampler_pads_with_non_indicated_entries_and_we_do_not(tf_out):
    # the known divergence: 3 indicated, sample size 5 -> TF also samples the first 2
    # non-indicated entries (0 and 1); we sample only the 3 indicated ones.
    ind, lab = tf_out["smp_c_ind"], tf_out["smp_c_lab"]
    got = np.asarray(balanced_sample(ind, lab, 5, 0.5, jax.random.key(0)))
    np.testing.assert_array_equal(got, ind)
    first_free = np.flatnonzero(~ind)[:2]
    tf_minus_pad = tf_out["smp_c"].copy()
    tf_minus_pad[first_free] = False
    np.testing.assert_array_equal(tf_minus_pad, got)
    assert tf_out["smp_c"][first_free].all()


def test_counts_equal_tf_static_sampler_on_random_cases(tf_out):
    ind, lab, runs = tf_out["smp_d_ind"], tf_out["smp_d_lab"], tf_out["smp_d"]
    ours = np.asarray(batch_balanced_sample(ind, lab, 16, 0.25, jax.random.key(11)))
    for r in range(2):
        tf_pos = (runs[:, r] & lab[r]).sum(1)
        tf_neg = (runs[:, r] & ~lab[r]).sum(1)
        assert not np.any(runs[:, r] & ~ind[r])  # TF stays inside the indicator here
        assert len(set(tf_pos)) == 1 and len(set(tf_neg)) == 1  # counts do not depend on draw
        assert (ours[r] & lab[r]).sum() == tf_pos[0]
        assert (ours[r] & ~lab[r]).sum() == tf_neg[0]
        assert not np.any(ours[r] & ~ind[r])
    # TF's draws differ across seeds (it is random), so only counts can be compared
    assert len({runs[s, 0].tobytes() for s in range(runs.shape[0])}) > 1
