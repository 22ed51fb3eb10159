"""Learning-rate schedules and optimizers.

The schedules reproduce the TF Object Detection API's ``utils/learning_schedules.py``
(the TF2 versions) step for step, so a migrated ``pipeline.config`` trains with the same
learning rate at every step. Each returns an ``optax.Schedule``: a jittable function of
the (integer) step count.

``make_optimizer`` assembles an ``optax.GradientTransformation``:
``clip_by_global_norm -> [L2 weight decay] -> optimizer`` (AdamW uses decoupled decay),
optionally applied to the trainable parameters only (``freeze_variables`` /
``update_trainable_variables``, see :func:`trainable_mask`).
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxdet.models.param_rules import ParamPattern, check_every_rule_matches, first_match

OptimizerName = Literal["momentum", "sgd", "adam", "adamw", "rmsprop"]
OPTIMIZER_NAMES: tuple[str, ...] = ("momentum", "sgd", "adam", "adamw", "rmsprop")


# --------------------------------------------------------------------------- schedules


class Schedule:
    """A learning-rate schedule (an ``optax.Schedule``: ``schedule(count) -> float32[]``) whose
    numbers can enter a compiled program as arguments instead of constants.

    ``rate(count, numbers)`` computes the rate from the step count and ``numbers`` (a dict of
    scalars: Python values here, traced float32 / int32 scalars inside a program); ``numbers``
    holds this schedule's own. Called plainly, the schedule uses its own numbers. Inside
    :meth:`bound` (the train step traces its body there), it uses the numbers given, so the
    compiled step takes them as an argument: two runs that differ only in the schedule's
    numbers (a longer ``train.num_steps``, another base rate) run the same program.
    Only the shape of the schedule (which phases it has, how many boundaries) is fixed by
    the program.
    """

    def __init__(self, rate: Callable[[Any, Mapping[str, Any]], Any],
                 numbers: Mapping[str, float | int]):
        self._rate = rate
        self.numbers = dict(numbers)
        self._bound = threading.local()

    def __call__(self, count):
        numbers = getattr(self._bound, "numbers", None)
        return self._rate(count, self.numbers if numbers is None else numbers)

    @contextlib.contextmanager
    def bound(self, numbers: Mapping[str, Any]):
        """Within the block (in this thread), the schedule reads ``numbers`` (e.g. a program's
        traced arguments, as :meth:`arguments` made them) instead of its own."""
        previous = getattr(self._bound, "numbers", None)
        self._bound.numbers = numbers
        try:
            yield
        finally:
            self._bound.numbers = previous

    def arguments(self) -> dict[str, np.ndarray]:
        """This schedule's numbers as the arrays a program takes (int32 for integers, as step
        counts are compared; float32 for the rest)."""
        return {k: np.asarray(v, np.int32 if isinstance(v, int) and not isinstance(v, bool)
                              else np.float32) for k, v in self.numbers.items()}

    def scaled(self, factor: float) -> Schedule:
        """Every rate multiplied by ``factor`` (the linear scaling rule); the factor is one of
        the numbers."""
        rate = self._rate
        return Schedule(lambda count, n: rate(count, n) * n["scale"],
                        {**self.numbers, "scale": float(factor)})


def constant(learning_rate: float) -> Schedule:
    """A constant learning rate."""
    return Schedule(lambda count, n: jnp.full(jnp.shape(count), n["rate"], jnp.float32),
                    {"rate": float(learning_rate)})


def cosine_decay_with_warmup(
    learning_rate_base: float,
    total_steps: int,
    warmup_learning_rate: float = 0.0,
    warmup_steps: int = 0,
    hold_base_rate_steps: int = 0,
) -> Schedule:
    """Cosine decay with linear warmup and an optional hold, as the TF OD API.

    * ``step < warmup_steps``: ``warmup_lr + (base - warmup_lr) * step / warmup_steps``;
    * ``warmup_steps <= step <= warmup_steps + hold_base_rate_steps`` (hold > 0): ``base``;
    * then ``0.5 * base * (1 + cos(pi * (step - warmup - hold) / (total - warmup - hold)))``;
    * ``step > total_steps``: 0.

    Whether there is a warm-up and a hold is the schedule's shape; the rates and step counts
    are its numbers (see :class:`Schedule`).
    """
    base = float(learning_rate_base)
    warmup_lr = float(warmup_learning_rate)
    total_steps, warmup_steps, hold = int(total_steps), int(warmup_steps), int(hold_base_rate_steps)
    if total_steps < warmup_steps:
        raise ValueError(
            f"cosine_decay_with_warmup: total_steps ({total_steps}) must be >= "
            f"warmup_steps ({warmup_steps})."
        )
    if warmup_steps > 0 and base < warmup_lr:
        raise ValueError(
            f"cosine_decay_with_warmup: learning_rate_base ({base}) must be >= "
            f"warmup_learning_rate ({warmup_lr})."
        )
    has_hold, has_warmup = hold > 0, warmup_steps > 0
    numbers = {
        "half_base": 0.5 * base, "base": base, "total_steps": total_steps,
        # where the cosine starts, and its length: TF divides by zero when the length is 0
        # (nan at step == total); any positive value gives the same rates elsewhere
        "decay_start": float(warmup_steps + hold),
        "decay_span": float(max(total_steps - warmup_steps - hold, 1)),
        "hold_end": warmup_steps + hold, "warmup_steps": warmup_steps,
        "warmup_rate": warmup_lr,
        "warmup_slope": (base - warmup_lr) / warmup_steps if has_warmup else 0.0,
    }

    def rate(count, n):
        step = jnp.asarray(count)
        stepf = step.astype(jnp.float32)
        lr = n["half_base"] * (1.0 + jnp.cos(math.pi * (stepf - n["decay_start"])
                                             / n["decay_span"]))
        if has_hold:
            lr = jnp.where(step > n["hold_end"], lr, n["base"])
        if has_warmup:
            lr = jnp.where(step < n["warmup_steps"], n["warmup_slope"] * stepf + n["warmup_rate"],
                           lr)
        return jnp.where(step > n["total_steps"], 0.0, lr).astype(jnp.float32)

    return Schedule(rate, numbers)


def manual_stepping(
    boundaries: Sequence[int], rates: Sequence[float], warmup: bool = False
) -> Schedule:
    """Piecewise-constant rates, as the TF OD API's ``manual_stepping``.

    ``rates[i]`` holds for ``boundaries[i-1] <= step < boundaries[i]``. With ``warmup``,
    steps ``0 .. boundaries[0]-1`` interpolate linearly from ``rates[0]`` towards
    ``rates[1]`` (``rates[0] + (rates[1] - rates[0]) * step / boundaries[0]``). The number of
    boundaries is the schedule's shape; their values and the rates are its numbers.
    """
    boundaries = list(boundaries)
    if any(isinstance(b, bool) or int(b) != b or b < 0 for b in boundaries):
        raise ValueError(
            f"manual_stepping: boundaries must be non-negative integers, got {boundaries}."
        )
    boundaries = [int(b) for b in boundaries]
    if any(b1 <= b0 for b0, b1 in zip(boundaries[:-1], boundaries[1:], strict=False)):
        raise ValueError(
            f"manual_stepping: boundaries must be strictly increasing, got {boundaries}."
        )
    rates = [float(r) for r in rates]
    if len(rates) != len(boundaries) + 1:
        raise ValueError(
            f"manual_stepping: need exactly len(boundaries) + 1 = {len(boundaries) + 1} rates, "
            f"got {len(rates)}."
        )
    if boundaries and boundaries[0] == 0:
        raise ValueError("manual_stepping: the first boundary cannot be zero.")

    do_warmup = bool(warmup and boundaries)
    numbers: dict[str, float | int] = {f"boundary_{i}": b for i, b in enumerate(boundaries)}
    numbers.update({f"rate_{i}": r for i, r in enumerate(rates)})
    if do_warmup:
        numbers["warmup_slope"] = (rates[1] - rates[0]) / boundaries[0]
    count_boundaries = len(boundaries)

    def rate(count, n):
        step = jnp.asarray(count)
        lr = jnp.asarray(n["rate_0"], jnp.float32)
        for i in range(count_boundaries):  # the rate after each boundary passed
            lr = jnp.where(step >= n[f"boundary_{i}"], n[f"rate_{i + 1}"], lr)
        if do_warmup:
            warm = n["rate_0"] + n["warmup_slope"] * step.astype(jnp.float32)
            lr = jnp.where(step < n["boundary_0"], warm, lr)
        return jnp.asarray(lr).astype(jnp.float32)

    return Schedule(rate, numbers)


def exponential_decay(
    initial_learning_rate: float,
    decay_steps: int,
    decay_factor: float,
    staircase: bool = True,
    burnin_learning_rate: float = 0.0,
    burnin_steps: int = 0,
    min_learning_rate: float = 0.0,
) -> Schedule:
    """Exponential decay with a burn-in period, as the TF OD API.

    ``step < burnin_steps``: ``burnin_learning_rate`` (0 means ``initial_learning_rate``);
    then ``initial * decay_factor ** ((step - burnin_steps) / decay_steps)`` (floored
    exponent when ``staircase``); never below ``min_learning_rate``.
    """
    base = float(initial_learning_rate)
    if decay_steps <= 0:
        raise ValueError(f"exponential_decay: decay_steps must be positive, got {decay_steps}.")
    numbers = {
        "base": base, "factor": float(decay_factor), "min_rate": float(min_learning_rate),
        "burnin_rate": float(burnin_learning_rate) if burnin_learning_rate != 0 else base,
        "burnin_steps": int(burnin_steps), "decay_steps": float(int(decay_steps)),
    }

    def rate(count, n):
        step = jnp.asarray(count)
        p = (step - n["burnin_steps"]).astype(jnp.float32) / n["decay_steps"]
        if staircase:
            p = jnp.floor(p)
        post = n["base"] * jnp.power(jnp.asarray(n["factor"], jnp.float32), p)
        lr = jnp.where(step < n["burnin_steps"], n["burnin_rate"], post)
        return jnp.maximum(lr, n["min_rate"]).astype(jnp.float32)

    return Schedule(rate, numbers)


# --------------------------------------------------------------------------- optimizers


def default_decay_mask(params: Any) -> Any:
    """Decay only kernels (ndim > 1): no decay on biases or normalization scales."""
    return jax.tree.map(lambda p: jnp.ndim(p) > 1, params)


def decay_weights(
    params: Any,
    weight_decay: float,
    rules: Sequence[tuple[ParamPattern, float]] = (),
    mask: Callable[[Any], Any] | None = None,
    *,
    check: bool = True,
) -> Any:
    """Pytree of floats over ``params``: each parameter's L2 weight decay. The first of
    ``rules`` (``(pattern, weight)``, see ``models.param_rules``) that matches its path
    decides; the others get ``weight_decay`` where ``mask`` (default
    :func:`default_decay_mask`: kernels only) is True, else 0.

    Raises:
      ValueError: with ``check``, a rule that matches no parameter.
    """
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    patterns = [pattern for pattern, _ in rules]
    if check:
        check_every_rule_matches(patterns, ((param_path(k), jnp.shape(v)) for k, v in flat),
                                 "train.optimizer.weight_decay_rules")
    default = (mask or default_decay_mask)(params)

    def weight(path, p, decayed):
        k = first_match(patterns, param_path(path), jnp.shape(p))
        if k is not None:
            return float(rules[k][1])
        return float(weight_decay) if decayed else 0.0

    return jax.tree_util.tree_map_with_path(weight, params, default)


def l2_regularization(
    weight_decay: float,
    rules: Sequence[tuple[ParamPattern, float]] = (),
    mask: Callable[[Any], Any] | None = None,
) -> Callable[[Any], jax.Array]:
    """``loss(params)``: the L2 regularization loss whose gradient the coupled weight decay
    adds, ``sum(w / 2 * |p|^2)`` with each parameter's ``w`` from :func:`decay_weights`: the
    TF OD API's ``Loss/regularization_loss`` (its ``l2_regularizer.weight`` w is a Keras
    ``l2(w / 2)``)."""

    def loss(params: Any) -> jax.Array:
        weights = decay_weights(params, weight_decay, rules, mask, check=False)
        terms = [0.5 * w * jnp.sum(jnp.square(p.astype(jnp.float32)))
                 for p, w in zip(jax.tree.leaves(params), jax.tree.leaves(weights), strict=True)
                 if w]
        return sum(terms, jnp.zeros((), jnp.float32))

    return loss


def add_decayed_weights_by_param(
    weights: Callable[[Any], Any],
) -> optax.GradientTransformation:
    """``updates + w * params`` with ``w = weights(params)`` per parameter (a pytree of floats,
    known when tracing: parameters with ``w == 0`` are left as they are)."""

    def init(params):
        del params
        return optax.EmptyState()

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("add_decayed_weights_by_param needs the params")
        coef = weights(params)
        new = jax.tree.map(lambda g, p, w: g + w * p if w else g, updates, params, coef)
        return new, state

    return optax.GradientTransformation(init, update)


def param_path(path: tuple) -> str:
    """A pytree key path as the '/'-joined name the regexes see, e.g.
    ``backbone/layer1/0/conv1/kernel``."""
    parts = []
    for key in path:
        for attr in ("key", "name", "idx"):
            if hasattr(key, attr):
                parts.append(str(getattr(key, attr)))
                break
        else:
            parts.append(str(key))
    return "/".join(parts)


def trainable_mask(
    params: Any,
    freeze_variables: Sequence[str] = (),
    update_trainable_variables: Sequence[str] = (),
    variable_names: Mapping[str, Sequence[str]] | None = None,
) -> Any:
    """Pytree of bools over ``params``: True where the parameter is trained.

    As TF OD API's ``train_config`` (slim ``filter_variables``): with
    ``update_trainable_variables`` only the parameters one of its regexes ``re.search``-es
    are candidates; any that a ``freeze_variables`` regex matches is then left out. A regex
    sees a parameter's path (:func:`param_path`) and the other names ``variable_names`` gives
    it (``{path: [name, ...]}``: e.g. its TF variable name, from a TF checkpoint); it matches
    the parameter if it matches any of them. A regex that matches no parameter at all is an
    error (a typo would otherwise silently train everything).
    """
    variable_names = variable_names or {}
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    paths = [param_path(path) for path, _ in flat]

    def names(path: str) -> tuple[str, ...]:
        return (path, *variable_names.get(path, ()))

    def matches(patterns: Sequence[str], path: str) -> bool:
        return any(re.search(p, name) for p in patterns for name in names(path))

    for field, patterns in (("freeze_variables", freeze_variables),
                            ("update_trainable_variables", update_trainable_variables)):
        for pattern in patterns:
            if not any(matches((pattern,), p) for p in paths):
                examples = ", ".join(paths[:3] + paths[-2:])
                other = [n for p in paths[:2] for n in variable_names.get(p, ())[:1]]
                raise ValueError(
                    f"train.{field}: {pattern!r} matches no parameter; paths look like "
                    f"{examples}" + (f" (TF names like {', '.join(other)})" if other else ""))

    def trained(path, _):
        name = param_path(path)
        if update_trainable_variables and not matches(update_trainable_variables, name):
            return False
        return not matches(freeze_variables, name)

    return jax.tree_util.tree_map_with_path(trained, params)


def make_optimizer(
    name: OptimizerName,
    learning_rate: optax.Schedule | float,
    *,
    momentum: float = 0.9,
    nesterov: bool = False,
    beta1: float = 0.9,
    beta2: float = 0.999,
    epsilon: float = 1e-8,
    rmsprop_decay: float = 0.9,
    weight_decay: float = 0.0,
    clip_gradient_norm: float | None = None,
    decay_mask: Callable[[Any], Any] | None = None,
    weight_decay_rules: Sequence[tuple[ParamPattern, float]] = (),
    momentum_form: Literal["optax", "keras"] = "optax",
    freeze_variables: Sequence[str] = (),
    update_trainable_variables: Sequence[str] = (),
    variable_names: Mapping[str, Sequence[str]] | None = None,
) -> optax.GradientTransformation:
    """Build the optimizer: coupled weight decay, then clipping by global norm, then the update.

    For ``momentum``/``sgd``/``adam``/``rmsprop`` the weight decay is an L2 regularizer
    (TF OD API style): ``grad += weight_decay * param`` on the masked params, before the
    optimizer sees the gradient. (The TF OD API's ``l2_regularizer.weight`` w adds
    ``w/2 * |param|^2`` to the loss, i.e. ``weight_decay = w`` here.) ``adamw`` uses
    optax's decoupled decay (scaled by the learning rate). ``decay_mask`` maps params to a
    pytree of bools; the default decays only params with ``ndim > 1``.
    ``weight_decay_rules`` (``(pattern, weight)`` pairs, see :func:`decay_weights`) give
    some parameters their own weight instead (0: none), as TF regularizes each layer with
    its own hyperparams.

    ``rmsprop`` follows Keras' RMSprop (used by the TF2 OD API): epsilon outside the
    square root, accumulator initialised to zero, momentum when ``momentum > 0``.

    ``momentum_form`` (``momentum`` and ``rmsprop`` with momentum): ``optax`` keeps the
    velocity in gradient units and multiplies it by the current rate (``v = m v + g``,
    ``step = -lr v``); ``keras`` scales each gradient by the rate of its own step as it enters
    the velocity (``v = m v - lr g``, ``step = v``), as TF2's Keras optimizers (the TF OD
    API's) do. The two agree while the rate is constant; while it changes, the velocity of
    ``keras`` carries the earlier rates (about 9 steps back at momentum 0.9).

    ``freeze_variables`` / ``update_trainable_variables`` (regexes over parameter paths and
    ``variable_names``, see :func:`trainable_mask`): the whole chain above runs on the
    trained parameters only (``optax.multi_transform``; clipping sees their gradients only,
    as TF clips the trainable variables' gradients); the others get a zero update, so they
    keep their exact values and carry no optimizer state.
    """
    if name not in OPTIMIZER_NAMES:
        raise ValueError(f"optimizer name {name!r} is not one of {list(OPTIMIZER_NAMES)}.")
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay}.")
    if clip_gradient_norm is not None and clip_gradient_norm <= 0:
        raise ValueError(f"clip_gradient_norm must be positive or None, got {clip_gradient_norm}.")
    mask = decay_mask if decay_mask is not None else default_decay_mask
    rules = tuple(weight_decay_rules)
    frozen = bool(freeze_variables or update_trainable_variables)

    def by_param(check: bool) -> optax.GradientTransformation:
        return add_decayed_weights_by_param(
            lambda params: decay_weights(params, weight_decay, rules, mask, check=check))

    # Coupled L2 (every optimizer but AdamW) comes first, as TF adds its regularization
    # loss's gradients before clipping; then clipping and the update. (Frozen parameters are
    # masked out of what the chain sees, so the rules are checked only without them.)
    chain: list[optax.GradientTransformation] = []
    if name != "adamw" and rules:
        chain.append(by_param(check=not frozen))
    elif name != "adamw" and weight_decay > 0:
        chain.append(optax.add_decayed_weights(weight_decay, mask=mask))
    if clip_gradient_norm is not None:
        chain.append(optax.clip_by_global_norm(float(clip_gradient_norm)))
    if name == "adamw" and rules:  # frozen parameters are masked out of what it sees
        chain += [optax.scale_by_adam(b1=beta1, b2=beta2, eps=epsilon, nesterov=nesterov),
                  by_param(check=not frozen), optax.scale_by_learning_rate(learning_rate)]
    elif name == "adamw":
        chain.append(
            optax.adamw(
                learning_rate, b1=beta1, b2=beta2, eps=epsilon,
                weight_decay=weight_decay, mask=mask, nesterov=nesterov,
            )
        )
    elif name in ("momentum", "rmsprop") and momentum_form == "keras" and momentum > 0:
        if name == "rmsprop":
            chain.append(optax.scale_by_rms(decay=rmsprop_decay, eps=epsilon, eps_in_sqrt=False))
        # the rate scales each gradient as it enters the velocity (Keras: v = m v - lr g)
        chain += [optax.scale_by_learning_rate(learning_rate),
                  optax.trace(decay=momentum, nesterov=nesterov)]
    elif name == "momentum":
        chain.append(optax.sgd(learning_rate, momentum=momentum, nesterov=nesterov))
    elif name == "sgd":
        chain.append(optax.sgd(learning_rate))
    elif name == "adam":
        chain.append(optax.adam(learning_rate, b1=beta1, b2=beta2, eps=epsilon, nesterov=nesterov))
    else:  # rmsprop
        chain.append(
            optax.rmsprop(
                learning_rate, decay=rmsprop_decay, eps=epsilon, eps_in_sqrt=False,
                momentum=momentum if momentum > 0 else None, nesterov=nesterov,
            )
        )
    tx = chain[0] if len(chain) == 1 else optax.chain(*chain)
    if frozen:
        freeze, update = tuple(freeze_variables), tuple(update_trainable_variables)

        def labels(params):
            trained = trainable_mask(params, freeze, update, variable_names)
            return jax.tree.map(lambda t: "trained" if t else "frozen", trained)

        tx = optax.multi_transform({"trained": tx, "frozen": optax.set_to_zero()}, labels)
    return tx


__all__ = [
    "OPTIMIZER_NAMES",
    "Schedule",
    "constant",
    "add_decayed_weights_by_param",
    "cosine_decay_with_warmup",
    "decay_weights",
    "default_decay_mask",
    "exponential_decay",
    "l2_regularization",
    "make_optimizer",
    "manual_stepping",
    "param_path",
    "trainable_mask",
]
