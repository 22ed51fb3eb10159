"""The optimizer, schedule, loss scaling and jitted train step of a config's ``train`` section.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import jax
import optax

from jaxdet.backends.dispatch import compiler_options
from jaxdet.config import schema as S
from jaxdet.data.normalize import PixelNormalizer
from jaxdet.models.param_rules import ParamPattern
from jaxdet.models.task import Task
from jaxdet.train import optim
from jaxdet.train.checkpoint import Checkpointer
from jaxdet.train.loss_scale import LossScaleParams
from jaxdet.train.remote_workdir import checkpoints_location
from jaxdet.train.step import make_train_step

log = logging.getLogger("jaxdet")



def build_schedule(cfg: S.TrainConfig) -> optim.Schedule:
    """The learning-rate schedule of ``train`` (step -> rate; its numbers enter the train step
    as arguments, see ``optim.Schedule``); with ``reference_batch_size`` every rate is
    multiplied by ``batch_size / reference_batch_size`` (the linear scaling rule)."""
    schedule = _unscaled_schedule(cfg)
    if cfg.reference_batch_size is None or cfg.reference_batch_size == cfg.batch_size:
        return schedule
    factor = cfg.batch_size / cfg.reference_batch_size
    log.info("learning rates x %g: train.batch_size %d over train.reference_batch_size %d "
             "(the linear scaling rule)", factor, cfg.batch_size, cfg.reference_batch_size)
    return schedule.scaled(factor)


def _unscaled_schedule(cfg: S.TrainConfig) -> optim.Schedule:
    lr = cfg.learning_rate
    if isinstance(lr, S.CosineLearningRateConfig):
        return optim.cosine_decay_with_warmup(
            lr.learning_rate_base,
            lr.total_steps or cfg.num_steps,
            warmup_learning_rate=lr.warmup_learning_rate,
            warmup_steps=lr.warmup_steps,
            hold_base_rate_steps=lr.hold_base_rate_steps,
        )
    if isinstance(lr, S.ManualStepLearningRateConfig):
        return optim.manual_stepping(list(lr.boundaries), list(lr.rates), warmup=lr.warmup)
    if isinstance(lr, S.ExponentialLearningRateConfig):
        return optim.exponential_decay(
            lr.initial_learning_rate,
            lr.decay_steps,
            lr.decay_factor,
            staircase=lr.staircase,
            burnin_learning_rate=lr.burnin_learning_rate,
            burnin_steps=lr.burnin_steps,
            min_learning_rate=lr.min_learning_rate,
        )
    return optim.constant(lr.learning_rate)


VARIABLE_NAMES_FILE = "tf_variable_names.json"


def regex_variable_names(cfg: S.TrainConfig, workdir: Path,
                         found: dict[str, list[str]] | None = None
                         ) -> dict[str, list[str]] | None:
    """Other names of the parameters that ``train.freeze_variables`` /
    ``update_trainable_variables`` regexes may match (for :func:`build_optimizer`): the TF
    variable names of the TF checkpoint a run started from (``found``: those its weights
    import gave, ``ImportReport.variable_names``). They are kept in the workdir
    (``tf_variable_names.json``) once found, so a resumed run rebuilds the same optimizer even
    when the TF checkpoint has moved. None when no regex is set or there are no such names."""
    if not (cfg.freeze_variables or cfg.update_trainable_variables):
        return None
    saved = Path(workdir) / VARIABLE_NAMES_FILE
    if saved.is_file():
        return json.loads(saved.read_text())
    if not found:
        return None
    if jax.process_index() == 0:
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(json.dumps(found, indent=0, sort_keys=True))
    return found


def build_optimizer(
    cfg: S.TrainConfig, variable_names: dict[str, list[str]] | None = None,
) -> tuple[optax.GradientTransformation, optim.Schedule]:
    """The optimizer and learning-rate schedule of ``train``. ``variable_names``: other names
    of the parameters (``{path: [name, ...]}``, e.g. TF variable names:
    :func:`regex_variable_names`) that ``freeze_variables`` regexes may match."""
    o = cfg.optimizer
    schedule = build_schedule(cfg)
    tx = optim.make_optimizer(
        o.name,
        schedule,
        momentum=o.momentum,
        nesterov=o.nesterov,
        beta1=o.beta1,
        beta2=o.beta2,
        epsilon=o.epsilon,
        rmsprop_decay=o.rmsprop_decay,
        weight_decay=o.weight_decay,
        weight_decay_rules=[(ParamPattern(r.params, r.depthwise), r.weight)
                            for r in o.weight_decay_rules],
        momentum_form=o.momentum_form,
        clip_gradient_norm=o.clip_gradient_norm,
        freeze_variables=tuple(cfg.freeze_variables),
        update_trainable_variables=tuple(cfg.update_trainable_variables),
        variable_names=variable_names,
    )
    return tx, schedule


def build_regularization(cfg: S.TrainConfig):
    """``loss(params)`` of the L2 regularization the optimizer's coupled weight decay applies
    (``optim.l2_regularization``), reported as the ``regularization_loss`` metric; None for
    AdamW's decoupled decay or no decay."""
    o = cfg.optimizer
    if o.name == "adamw" or (o.weight_decay == 0 and not o.weight_decay_rules):
        return None
    return optim.l2_regularization(
        o.weight_decay, [(ParamPattern(r.params, r.depthwise), r.weight)
                         for r in o.weight_decay_rules])


def build_loss_scale(config: S.Config) -> LossScaleParams | None:
    """Dynamic loss-scaling settings for ``precision: fp16`` (``train.loss_scale``); None for
    fp32 / bf16, which need none."""
    if config.precision != "fp16":
        return None
    return LossScaleParams(**config.train.loss_scale.model_dump())


def predict_compiler_options(config: S.Config) -> dict[str, str] | None:
    """``compiler_options`` for jitting ``task.predict`` of ``config``: on CPU, Eigen
    convolutions for a detector with a ResNet backbone (``resnet*``, ``resnet_v2_*``), where
    they were faster than YNNPACK's; None for every other model (see
    ``backends.cpu.compile_options``)."""
    backbone = getattr(getattr(config.model, "backbone", None), "name", "") or ""
    return compiler_options(
        eigen_convolutions=config.data.type == "images" and backbone.startswith("resnet"))


def build_train_step(
    config: S.Config,
    task: Task,
    tx: optax.GradientTransformation,
    schedule: optax.Schedule,
    *,
    state_sharding=None,
    batch_sharding=None,
    normalizer: PixelNormalizer | None = None,
):
    """The jitted ``step(state, batch) -> (state, metrics)`` of ``config``: EMA,
    ``train.accumulate_steps``, fp16 loss scaling and ``allow_tf32`` (see
    ``train.step.make_train_step``; its state comes from ``init_train_state(...,
    loss_scale=build_loss_scale(config))``). On CPU, a detector's step runs its convolutions
    with Eigen (``jaxdet.backends.cpu.compile_options``).

    ``normalizer``: the batches come from ``data.build.build_train_loader`` (raw ``images``
    and ``image_info``, ``data.build.train_batch_layout``), and the step normalizes them first
    with it (``tasks.Family.normalizer()``); None: they hold the network's input already."""
    return make_train_step(
        task,
        tx,
        schedule,
        ema_decay=config.train.ema_decay,
        ema_dynamic_decay=config.train.ema_dynamic_decay,
        ema_dynamic_decay_offset=config.train.ema_dynamic_decay_offset,
        accumulate_steps=config.train.accumulate_steps,
        loss_scale=build_loss_scale(config),
        allow_tf32=config.allow_tf32,
        state_sharding=state_sharding,
        batch_sharding=batch_sharding,
        compiler_options=compiler_options(eigen_convolutions=config.data.type == "images"),
        normalizer=None if normalizer is None else normalizer.normalize_batch,
        # TF's Loss/regularization_loss, for the TF dashboards' layout (it costs a compile ~4%)
        regularization=(build_regularization(config.train)
                        if config.train.tensorboard_tags == "tf" else None),
    )


def build_checkpointer(config: S.Config, workdir: Path, *, read_only: bool = False
                       ) -> Checkpointer:
    """The workdir's checkpoints (``workdir/checkpoints``, or the bucket's when ``workdir`` is
    the staging folder of a ``gs://`` workdir; ``train.keep_checkpoints`` kept, one every
    ``train.checkpoint_every`` steps); ``read_only`` for a reader beside a run that may be
    writing."""
    return Checkpointer(
        checkpoints_location(workdir),
        keep=config.train.keep_checkpoints,
        every_steps=config.train.checkpoint_every,
        read_only=read_only,
    )
