"""Static-shape minibatch samplers (TF OD API ``BalancedPositiveNegativeSampler``).

Two-stage detectors train the RPN and the box classifier on a fixed-size random minibatch
per image: at most ``floor(sample_size * positive_fraction)`` positives, the rest negatives.
Here the minibatch is a ``[N]`` bool mask (static shape) drawn with an explicit JAX key.

Differences from TF's ``is_static=True`` sampler, on purpose (see ``balanced_sample``): TF,
when fewer than ``sample_size`` entries are indicated, also samples the first non-indicated
entries (index order) so that exactly ``sample_size`` come out, and when there are too few
negatives its slice can take extra positives or an arbitrary entry; here nothing outside
``indicator`` is ever sampled and the positive cap always holds. Where TF's result does not
depend on its random draw and it does not pad, the two agree.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _check(sample_size: int, positive_fraction: float) -> int:
    if not 0.0 <= positive_fraction <= 1.0:
        raise ValueError(f"positive_fraction must be in [0, 1]; got {positive_fraction}")
    if int(sample_size) != sample_size or sample_size < 0:
        raise ValueError(f"sample_size must be a non-negative int; got {sample_size}")
    return int(sample_size * positive_fraction)  # TF: int(batch_size * positive_fraction)


def balanced_sample(
    indicator: jnp.ndarray,
    labels: jnp.ndarray,
    sample_size: int,
    positive_fraction: float,
    key: jax.Array,
) -> jnp.ndarray:
    """Random balanced minibatch of one image's candidates -> ``[N]`` bool.

    Candidates are the ``indicator`` entries; positives are candidates with ``labels``. The
    sample holds ``P = min(floor(sample_size * positive_fraction), #positives)`` positives and
    ``min(sample_size - P, #negatives)`` negatives, each a uniformly random subset (one random
    permutation from ``key``; the same key gives the same sample). So exactly
    ``min(sample_size, #candidates)`` entries are sampled whenever negatives are plentiful;
    missing positives are made up with negatives, missing negatives are not made up.

    Args:
      indicator: ``[N]`` bool, which entries may be sampled (e.g. anchors not ignored).
      labels: ``[N]`` bool, positive (True) or negative; ignored where ``indicator`` is False.
      sample_size: minibatch size, static (TF ``batch_size``).
      positive_fraction: in ``[0, 1]``, static.
      key: a JAX PRNG key.

    Returns:
      ``[N]`` bool, True for the sampled entries (always a subset of ``indicator``).
    """
    max_positives = _check(sample_size, positive_fraction)
    indicator = jnp.asarray(indicator, bool)
    labels = jnp.asarray(labels, bool)
    if indicator.ndim != 1 or labels.shape != indicator.shape:
        raise ValueError(f"indicator and labels must be [N]; got {indicator.shape}, "
                         f"{labels.shape}")
    n = indicator.shape[0]
    perm = jax.random.permutation(key, n)
    pos = (indicator & labels)[perm]
    neg = (indicator & ~labels)[perm]
    # rank (1-based) of each positive / negative in the random order; keep the first ones.
    pos_rank = jnp.cumsum(pos.astype(jnp.int32))
    neg_rank = jnp.cumsum(neg.astype(jnp.int32))
    num_pos = jnp.minimum(max_positives, pos_rank[-1] if n else 0)
    take = (pos & (pos_rank <= num_pos)) | (neg & (neg_rank <= sample_size - num_pos))
    return jnp.zeros(n, bool).at[perm].set(take)


def batch_balanced_sample(
    indicator: jnp.ndarray,
    labels: jnp.ndarray,
    sample_size: int,
    positive_fraction: float,
    key: jax.Array,
) -> jnp.ndarray:
    """``balanced_sample`` per image: ``indicator``, ``labels`` ``[B, N]`` -> ``[B, N]`` bool.

    Image ``b`` uses ``jax.random.split(key, B)[b]``.
    """
    _check(sample_size, positive_fraction)
    indicator = jnp.asarray(indicator, bool)
    labels = jnp.asarray(labels, bool)
    if indicator.ndim != 2 or labels.shape != indicator.shape:
        raise ValueError(f"indicator and labels must be [B, N]; got {indicator.shape}, "
                         f"{labels.shape}")
    keys = jax.random.split(key, indicator.shape[0])
    return jax.vmap(lambda i, lab, k: balanced_sample(i, lab, sample_size, positive_fraction,
                                                      k))(indicator, labels, keys)
