"""Static-shape matchers: argmax (TF OD API ``ArgMaxMatcher``) and greedy bipartite
(TF ``GreedyBipartiteMatcher``).

A match is an ``int32`` vector over columns (anchors): ``>= 0`` the matched row (ground
truth), ``-1`` unmatched (a negative), ``-2`` ignored.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

UNMATCHED = -1
IGNORED = -2


def argmax_match(
    similarity: jnp.ndarray,
    valid_rows: jnp.ndarray,
    matched_threshold: float | None,
    unmatched_threshold: float | None = None,
    negatives_lower_than_unmatched: bool = True,
    force_match_for_each_row: bool = False,
) -> jnp.ndarray:
    """Match each column of ``similarity[N, M]`` to its best valid row -> ``[M]`` int32.

    Per column, with ``v`` the best similarity over valid rows:
    ``v >= matched_threshold`` -> that row; otherwise, with ``negatives_lower_than_unmatched``
    ``v < unmatched_threshold`` -> -1 and ``unmatched <= v < matched`` -> -2 (swapped
    without it). ``unmatched_threshold`` defaults to ``matched_threshold``;
    ``matched_threshold=None`` matches every column to its best row. Invalid (padded) rows
    never match; with no valid row every column is -1. ``force_match_for_each_row`` then
    matches each valid row's best column to that row (lowest row index wins a column
    several rows force), whatever the thresholds say.
    """
    if matched_threshold is not None:
        if unmatched_threshold is None:
            unmatched_threshold = matched_threshold
        elif unmatched_threshold > matched_threshold:
            raise ValueError(
                f"unmatched_threshold ({unmatched_threshold}) must be <= "
                f"matched_threshold ({matched_threshold})"
            )
        if not negatives_lower_than_unmatched and unmatched_threshold == matched_threshold:
            raise ValueError(
                "with negatives_lower_than_unmatched=False, negatives lie between the "
                "thresholds, so unmatched_threshold must be < matched_threshold "
                f"(both are {matched_threshold})"
            )
    num_rows, num_cols = similarity.shape
    valid_rows = valid_rows.astype(bool)
    if num_rows == 0:
        return jnp.full((num_cols,), UNMATCHED, jnp.int32)

    masked = jnp.where(valid_rows[:, None], similarity, -jnp.inf)
    matches = jnp.argmax(masked, axis=0).astype(jnp.int32)
    if matched_threshold is not None:
        matched_vals = jnp.max(masked, axis=0)
        below = matched_vals < unmatched_threshold
        between = (matched_vals >= unmatched_threshold) & (matched_vals < matched_threshold)
        low_value, mid_value = (
            (UNMATCHED, IGNORED) if negatives_lower_than_unmatched else (IGNORED, UNMATCHED)
        )
        matches = jnp.where(below, low_value, matches)
        matches = jnp.where(between, mid_value, matches)

    if force_match_for_each_row:
        best_col = jnp.argmax(similarity, axis=1)  # [N]
        forced = (best_col[:, None] == jnp.arange(num_cols)[None, :]) & valid_rows[:, None]
        forcing_row = jnp.argmax(forced, axis=0).astype(jnp.int32)  # lowest forcing row
        matches = jnp.where(jnp.any(forced, axis=0), forcing_row, matches)

    return jnp.where(jnp.any(valid_rows), matches, UNMATCHED).astype(jnp.int32)


def bipartite_match(similarity: jnp.ndarray, valid_rows: jnp.ndarray) -> jnp.ndarray:
    """Greedy bipartite matching of ``similarity[N, M]`` -> ``[M]`` int32 (TF
    ``GreedyBipartiteMatcher``).

    ``min(N, M)`` times (a static ``lax.fori_loop``): take the largest similarity among the
    valid rows and the columns not yet matched (ties: the first in row-major order), match
    that column to that row, and remove the row and the column. Every valid row thus gets one
    column whatever its similarity (no thresholds); all other columns are -1 (negatives),
    none is ignored. Invalid (padded) rows never match. Unlike TF, which moves the valid rows
    first and returns indices into that reordered matrix, the indices here are the original
    row indices (the same when padding rows come last, as they do in jaxdet).
    """
    num_rows, num_cols = similarity.shape
    if num_rows == 0 or num_cols == 0:
        return jnp.full((num_cols,), UNMATCHED, jnp.int32)
    sim = jnp.where(valid_rows.astype(bool)[:, None], similarity.astype(jnp.float32), -jnp.inf)

    def body(_, carry):
        row_free, col_free, match = carry
        masked = jnp.where(row_free[:, None] & col_free[None, :], sim, -jnp.inf).reshape(-1)
        flat = jnp.argmax(masked)
        ok = masked[flat] > -jnp.inf
        row, col = flat // num_cols, flat % num_cols
        match = jnp.where(ok, match.at[col].set(row.astype(jnp.int32)), match)
        row_free = row_free.at[row].set(row_free[row] & ~ok)
        col_free = col_free.at[col].set(col_free[col] & ~ok)
        return row_free, col_free, match

    init = (
        jnp.ones((num_rows,), bool),
        jnp.ones((num_cols,), bool),
        jnp.full((num_cols,), UNMATCHED, jnp.int32),
    )
    _, _, match = jax.lax.fori_loop(0, min(num_rows, num_cols), body, init)
    return match


def gather_by_match(
    table: jnp.ndarray,
    match: jnp.ndarray,
    unmatched_value: jnp.ndarray,
    ignored_value: jnp.ndarray,
) -> jnp.ndarray:
    """Per column, the row ``table[match]`` -> ``[M, D]``; sentinels for -1 / -2.

    Gathers with a one-hot matmul (no dynamic-shape gather) over ``table[N, D]`` with the
    rows ``[ignored_value, unmatched_value]`` prepended (index ``match + 2``). The matmul
    runs at full float32 precision (no TF32 / bf16 passes on GPU/TPU); integer tables are
    gathered in float32 (exact below 2**24) and cast back. Table entries must be finite
    (``0 * inf`` is NaN): zero padded rows first.
    """
    dtype = table.dtype
    compute_dtype = dtype if jnp.issubdtype(dtype, jnp.floating) else jnp.float32
    d = table.shape[-1]
    full = jnp.concatenate(
        [
            jnp.broadcast_to(jnp.asarray(ignored_value, compute_dtype), (1, d)),
            jnp.broadcast_to(jnp.asarray(unmatched_value, compute_dtype), (1, d)),
            table.astype(compute_dtype),
        ],
        axis=0,
    )
    one_hot = jax.nn.one_hot(match + 2, full.shape[0], dtype=compute_dtype)
    out = jnp.matmul(one_hot, full, precision=jax.lax.Precision.HIGHEST)
    return out.astype(dtype)
