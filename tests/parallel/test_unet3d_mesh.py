"""The 3D U-Net over meshes of 8 emulated CPU devices that split the volume along depth, height
and width (``parallel.spatial_axes``): one train step equals the one-device step, the compiled
step exchanges halos (collective-permute) and all-gathers no activation beyond the thin maps
the layout gathers on purpose, and layouts that do not split give errors naming the field.

A tiny U-Net (filters 4, 8, 16: stride 4) on 32^3 patches, batch 2. On a 1 x 8 (depth) mesh
the level-2 map (8 rows, 1 per shard) is thin and gathered whole along depth
(``parallel.mesh.gather_thin_sides``); on 2 x 2 x 2 and 2 x (2 x 2) meshes every level stays
split. A 16^3 patch on 1 x 8 keeps the case the gather is there for: left split, its
bottleneck (4 rows over 8 shards) got a kernel gradient off by 2e-4 relative (jax 0.10.2,
XLA:CPU).
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from jaxdet.config.loader import load_config
from jaxdet.config.schema import EvalConfig, ParallelConfig, TrainConfig
from jaxdet.parallel import build as parallel_build
from jaxdet.parallel.mesh import (
    MeshLayoutError,
    check_volume_layout,
    make_mesh,
    split_levels,
)
from jaxdet.parallel.sharding import batch_sharding, place, place_batch, state_sharding
from jaxdet.tasks.unet3d import UNet3D, UNet3DTask
from jaxdet.tasks.unet3d.memory import compiled_step_memory
from jaxdet.train import build as train_build
from jaxdet.train.step import init_train_state, make_train_step

from .conftest import assert_trees_close

pytestmark = pytest.mark.xdist_group("mesh")

PATCH, BATCH, FILTERS = 32, 2, (4, 8, 16)
# (data, spatial_axes, patch side)
MESHES = [(1, (8,), PATCH), (1, (2, 2, 2), PATCH), (2, (2, 2), PATCH), (1, (8,), 16)]


def _task(patch: int = PATCH, conv_lowering: str = "native") -> UNet3DTask:
    # Seed 1: the init of seed 0 leaves a thin map's normalisation with a ~0 deviation, where
    # float rounding (a sum on one device or eight) moves the step's gradients by up to 0.5%.
    model = UNet3D(1, 3, FILTERS, conv_lowering=conv_lowering, rngs=nnx.Rngs(1))
    return UNet3DTask(model=model, input_size=(patch,) * 3, num_classes=3)


def _train_config(**kw) -> TrainConfig:
    return TrainConfig.model_validate({
        "batch_size": BATCH, "optimizer": {"name": "momentum"},
        "learning_rate": {"name": "constant", "learning_rate": 0.05}, **kw})


class _Reference:
    """The task, its initial state, a batch, and the one-device step's results."""

    def __init__(self, patch: int):
        self.patch = patch
        self.task = _task(patch)
        self.tx, self.schedule = train_build.build_optimizer(_train_config())
        self.state0 = jax.device_get(init_train_state(self.task, self.tx, ema=False))
        rng = np.random.default_rng(0)
        self.batch = {
            "images": rng.normal(size=(BATCH, patch, patch, patch, 1)).astype(np.float32),
            "labels": rng.integers(0, 3, (BATCH, patch, patch, patch)).astype(np.int32),
        }
        step = make_train_step(self.task, self.tx, self.schedule)
        self.state, self.metrics = jax.device_get(
            step(jax.tree.map(np.copy, self.state0), self.batch))


_REFERENCES: dict[int, _Reference] = {}


def _step_on_mesh(task, tx, schedule, state0, host_batch, mesh):
    """(state, metrics after one step, compiled step) of ``task`` on ``mesh``: the train
    state replicated, the batch split by the task's batch layout."""
    shardings = state_sharding(mesh, state0)
    batch_shardings = batch_sharding(mesh, task.batch_layout())
    step = make_train_step(task, tx, schedule, state_sharding=shardings,
                           batch_sharding=batch_shardings)
    state, batch = place(state0, shardings), place_batch(host_batch, batch_shardings)
    compiled = step.lower(state, batch).compile()
    return (*jax.device_get(compiled(state, batch)), compiled)


def _reference(patch: int) -> _Reference:
    if patch not in _REFERENCES:
        _REFERENCES[patch] = _Reference(patch)
    return _REFERENCES[patch]


def _ops(hlo: str, op: str) -> list[tuple[int, str]]:
    """(elements of the result, the largest member of a tuple result; the line) of every
    ``op`` in compiled HLO text."""
    found = []
    for line in hlo.splitlines():
        m = re.search(rf"= (.*?) {op}(-start)?\(", line)
        if m:
            shapes = re.findall(r"\w+\[([\d,]*)\]", m.group(1))
            size = max(math.prod(int(d) for d in dims.split(",") if d) for dims in shapes)
            found.append((size, line.strip()[:160]))
    return found


def _thin_inputs(patch: int, shards: tuple[int, ...], data: int) -> tuple[int, int]:
    """(elements per device of the largest map that may be all-gathered on purpose, the first
    level gathered whole): the input of the stride-2 convolution into the first level that
    ``split_levels`` gathers whole (XLA gathers that input rather than the convolution's
    output), or a thin map itself. (0, levels) when every level stays split."""
    largest, first = 0, len(FILTERS)
    for side_shards in shards:
        split = split_levels(patch, side_shards, 2 ** (len(FILTERS) - 1))
        for level, kept in enumerate(split):
            if not kept and side_shards > 1 and level > 0:
                above = level - 1
                largest = max(largest, BATCH // data * (patch // 2**above) ** 3 * FILTERS[above])
                first = min(first, level)
    return largest, first


@pytest.mark.parametrize("data,spatial_axes,patch", MESHES,
                         ids=[f"data{d}-{'x'.join(map(str, s))}-patch{p}" for d, s, p in MESHES])
def test_train_step_on_volume_mesh_equals_single_device(data: int, spatial_axes: tuple[int, ...],
                                                        patch: int) -> None:
    reference = _reference(patch)
    task = reference.task
    mesh = make_mesh(data, spatial_axes=spatial_axes)
    shardings = state_sharding(mesh, reference.state0)
    batch_shardings = batch_sharding(mesh, task.batch_layout())
    images = batch_shardings["images"]
    shards = (*spatial_axes, 1, 1)[:3]
    assert images.shard_shape((BATCH, patch, patch, patch, 1)) == (
        BATCH // data, *(patch // s for s in shards), 1)
    step = make_train_step(task, reference.tx, reference.schedule,
                           state_sharding=shardings, batch_sharding=batch_shardings)
    state, batch = place(reference.state0, shardings), place_batch(reference.batch,
                                                                   batch_shardings)
    compiled = step.lower(state, batch).compile()
    state, metrics = jax.device_get(compiled(state, batch))
    for key in ("loss", "dice_loss", "ce_loss", "grad_norm"):
        np.testing.assert_allclose(metrics[key], reference.metrics[key], rtol=1e-5, err_msg=key)
    assert_trees_close(state["params"], reference.state["params"], rtol=1e-5, atol=1e-6,
                       what="params")
    assert_trees_close(state["opt_state"], reference.state["opt_state"], rtol=1e-5, atol=1e-6,
                       what="opt_state")

    hlo = compiled.as_text()
    assert _ops(hlo, "collective-permute"), "no halo exchange: was the volume partitioned?"
    # parameters are replicated: gradient and statistics all-reduces are parameter-sized
    largest_param = max(int(np.size(x)) for x in jax.tree.leaves(reference.state0["params"]))
    big = [line for n, line in _ops(hlo, "all-reduce") if n > largest_param]
    assert not big, "\n".join(big[:5])
    # no activation is all-gathered but the thin maps the layout gathers on purpose (and the
    # input of the convolution into them); meshes without thin levels gather nothing
    allowed, first_thin = _thin_inputs(patch, tuple(spatial_axes), data)
    gathered = _ops(hlo, "all-gather")
    too_big = [line for n, line in gathered if n > max(allowed, largest_param)]
    assert not too_big, "\n".join(too_big[:5])
    if allowed == 0:
        assert not gathered, "\n".join(line for _, line in gathered[:5])
    if first_thin > 1:  # the full-resolution maps are never gathered
        full_resolution = BATCH // data * patch**3 * FILTERS[0]
        assert all(n < full_resolution for n, _ in gathered)


@pytest.mark.parametrize("data,spatial_axes", [(2, (4,)), (1, (1, 2, 2))])
def test_depth_stacked_convolutions_on_a_mesh_equal_the_native_single_device_step(
        data: int, spatial_axes: tuple[int, ...]) -> None:
    """The CPU lowering (``model.conv_lowering: depth_stacked``: depth taps stacked as
    channels of 2D convolutions, depth folded into the batch) partitions too when the volume
    is split along depth alone or height / width alone: the same step as the native
    one-device one, with halo exchanges and no all-gather. (Split along depth and height
    together, XLA gets its gradients wrong: ``build.conv_lowering`` keeps the native
    convolution there, see the next test.)"""
    reference = _reference(PATCH)
    state, metrics, compiled = _step_on_mesh(
        _task(PATCH, "depth_stacked"), reference.tx, reference.schedule, reference.state0,
        reference.batch, make_mesh(data, spatial_axes=spatial_axes))
    for key in ("loss", "dice_loss", "ce_loss", "grad_norm"):
        np.testing.assert_allclose(metrics[key], reference.metrics[key], rtol=1e-5, err_msg=key)
    assert_trees_close(state["params"], reference.state["params"], rtol=1e-5, atol=1e-6,
                       what="params")
    hlo = compiled.as_text()
    assert _ops(hlo, "collective-permute")
    largest_param = max(int(np.size(x)) for x in jax.tree.leaves(reference.state0["params"]))
    too_big = [line for n, line in _ops(hlo, "all-gather") if n > largest_param]
    assert not too_big, "\n".join(too_big[:5])


def test_auto_lowering_avoids_the_mixed_split():
    from jaxdet.tasks.unet3d.build import conv_lowering

    assert conv_lowering("auto", ParallelConfig()) == "depth_stacked"  # the CPU backend
    assert conv_lowering("auto", ParallelConfig(spatial=8)) == "depth_stacked"
    assert conv_lowering("auto", ParallelConfig(spatial_axes=(1, 2, 2))) == "depth_stacked"
    assert conv_lowering("auto", ParallelConfig(spatial_axes=(2, 2, 2))) == "native"
    assert conv_lowering("native", ParallelConfig()) == "native"
    with pytest.raises(ValueError, match=r"conv_lowering=depth_stacked with parallel.spatial_"
                                         r"axes=\[2, 2\]"):
        conv_lowering("depth_stacked", ParallelConfig(spatial_axes=(2, 2)))


def test_batch_specs_follow_the_mesh_axes() -> None:
    task = _task()
    specs = {k: s.spec for k, s in batch_sharding(make_mesh(1, spatial_axes=(2, 2, 2)),
                                                  task.batch_layout()).items()}
    assert specs == {"images": P("data", "spatial", "spatial_1", "spatial_2", None),
                     "labels": P("data", "spatial", "spatial_1", "spatial_2")}
    # a (data, spatial) mesh, as today: depth only
    mesh = make_mesh(-1, 4)
    assert mesh.axis_names == ("data", "spatial")
    assert batch_sharding(mesh, task.batch_layout())["images"].spec == P(
        "data", "spatial", None, None, None)
    assert make_mesh(1, spatial_axes=(8,)).axis_names == ("data", "spatial")
    assert make_mesh(1, spatial_axes=(4, 2, 1)).axis_names == ("data", "spatial", "spatial_1")
    assert dict(make_mesh(2, spatial_axes=(1, 2, 2)).shape) == {
        "data": 2, "spatial": 1, "spatial_1": 2, "spatial_2": 2}


def test_spatial_axes_config() -> None:
    assert ParallelConfig(spatial_axes=(2, 2, 2)).spatial == 8
    assert ParallelConfig(spatial_axes=(2, 2, 2), spatial=8).spatial == 8
    assert ParallelConfig().spatial_axes is None
    with pytest.raises(ValueError, match=r"spatial_axes=\[2, 2\] makes 4 spatial shards but "
                                         r"parallel.spatial=8"):
        ParallelConfig(spatial_axes=(2, 2), spatial=8)
    with pytest.raises(ValueError, match="at most 3"):
        ParallelConfig(spatial_axes=(1, 1, 2, 2))


def _config(spatial_axes, *, data: int = 1, batch_size: int = BATCH) -> SimpleNamespace:
    """The parts of a config that ``build_mesh`` and ``check_mesh_layout`` read."""
    return SimpleNamespace(
        parallel=ParallelConfig(data=data, spatial_axes=spatial_axes),
        train=_train_config(batch_size=batch_size), eval=EvalConfig(batch_size=2))


def test_volume_layout_errors_name_the_field() -> None:
    ok = _config((2, 2, 2))
    mesh = parallel_build.build_mesh(ok)
    assert dict(mesh.shape) == {"data": 1, "spatial": 2, "spatial_1": 2, "spatial_2": 2}
    parallel_build.check_mesh_layout(ok, mesh, _task())
    # a side that does not divide by its shards
    with pytest.raises(MeshLayoutError, match=r"model.patch_size=\[36, 36, 36\]: the depth 36 "
                                              r"does not divide over 8 shards \(parallel.spatial"
                                              r"=8\); .* multiple of 8 x 4 = 32 \(e.g. 32\)"):
        cfg = _config((8,))
        parallel_build.check_mesh_layout(cfg, parallel_build.build_mesh(cfg), _task(36))
    # a side that splits, but a level map that stays split (10 rows, >= 2 per shard) does not
    with pytest.raises(MeshLayoutError, match=r"the height 40 splits over 4 shards \(parallel."
                                              r"spatial_axes=\[2, 4\]\), but its level-2 map "
                                              r"\(height 10, stride 4\) does not"):
        check_volume_layout(make_mesh(1, spatial_axes=(2, 4)), batch_size=2,
                            patch_size=(40, 40, 40), max_stride=4)
    with pytest.raises(MeshLayoutError, match=r"train.batch_size=3 does not divide over "
                                              r"parallel.data=2"):
        cfg = _config((2, 2), data=2, batch_size=3)
        parallel_build.check_mesh_layout(cfg, parallel_build.build_mesh(cfg), _task())


def test_detectors_refuse_a_width_split() -> None:
    config = load_config("shapes_demo", ["data.resizer.height=64", "data.resizer.width=64",
                                         "model.backbone.depth_multiplier=0.25",
                                         "parallel.data=2", "parallel.spatial_axes=[2, 2]",
                                         "train.batch_size=2", "eval.batch_size=2"])
    assert config.parallel.spatial == 4
    # what check_mesh_layout reads of a detector task (building RetinaNet costs seconds)
    task = SimpleNamespace(input_size=(64, 64), max_stride=lambda: 32)
    with pytest.raises(MeshLayoutError, match=r"parallel.spatial_axes=\[2, 2\] splits the image "
                                              r"width, but detectors split the image height "
                                              r"only; use parallel.spatial_axes=\[4\]"):
        parallel_build.check_mesh_layout(config, parallel_build.build_mesh(config), task)
    # the first dimension alone is today's (data, spatial) mesh
    config = load_config("shapes_demo", ["data.resizer.height=64", "data.resizer.width=64",
                                         "model.backbone.depth_multiplier=0.25",
                                         "parallel.data=4", "parallel.spatial_axes=[2]",
                                         "train.batch_size=4", "eval.batch_size=4"])
    mesh = parallel_build.build_mesh(config)
    assert mesh.axis_names == ("data", "spatial") and dict(mesh.shape) == {"data": 4,
                                                                          "spatial": 2}
    parallel_build.check_mesh_layout(config, mesh, task)


def test_compiled_step_memory_reads_one_device_share() -> None:
    """The memory helper compiles on abstract arguments (nothing allocated): split over 8 depth
    shards, a device's activations (temp) are a fraction of the one-device step's, and the
    replicated train state (argument, output) is not."""
    task = _task(16)
    tx, schedule = train_build.build_optimizer(_train_config())
    one = compiled_step_memory(task, tx, schedule, batch_size=BATCH, mesh=None)
    eight = compiled_step_memory(task, tx, schedule, batch_size=BATCH,
                                 mesh=make_mesh(1, spatial_axes=(8,)))
    assert one["mesh"] == {} and eight["mesh"] == {"data": 1, "spatial": 8}
    assert eight["spatial_shards"] == [8]
    assert eight["temp_bytes"] < one["temp_bytes"] / 2
    assert eight["output_bytes"] == one["output_bytes"]  # the replicated new state + metrics
    assert one["total_bytes"] == (one["argument_bytes"] + one["output_bytes"]
                                  - one["alias_bytes"] + one["temp_bytes"]
                                  + one["generated_code_bytes"])
    with pytest.raises(MeshLayoutError, match="model.patch_size"):
        compiled_step_memory(_task(20), tx, schedule, batch_size=BATCH,
                             mesh=make_mesh(1, spatial_axes=(8,)))


def test_tpu_reference_train_step_on_volume_mesh_equals_single_device() -> None:
    """The TPU reference's network (``model.architecture: tpu_reference``: BatchNorm, max
    pooling, tiny filters 2, 4, 8; 16^3 patches) with its whole-batch adaptive Dice loss, on a
    2 x 2 x 2 (depth, height, width) mesh: loss, parameters, optimizer state and the BatchNorm
    running statistics equal the one-device step's (GSPMD makes the statistics those of the
    global batch), and the halos are exchanged."""
    from jaxdet.tasks.unet3d.tpu_reference import TPUReferenceUNet3D

    patch = 16  # level 2: 4 rows per side, 2 per shard (none gathered)
    model = TPUReferenceUNet3D(1, 3, (2, 4, 8), conv_lowering="native", rngs=nnx.Rngs(0))
    task = UNet3DTask(model=model, input_size=(patch,) * 3, num_classes=3,
                      loss_name="adaptive_dice")
    tx, schedule = train_build.build_optimizer(_train_config())
    state0 = jax.device_get(init_train_state(task, tx, ema=False))
    rng = np.random.default_rng(1)
    batch = {"images": rng.normal(size=(BATCH, patch, patch, patch, 1)).astype(np.float32),
             "labels": rng.integers(0, 3, (BATCH, patch, patch, patch)).astype(np.int32)}
    one_step = make_train_step(task, tx, schedule)
    expected, expected_metrics = jax.device_get(one_step(jax.tree.map(np.copy, state0), batch))

    state, metrics, compiled = _step_on_mesh(task, tx, schedule, state0, batch,
                                             make_mesh(1, spatial_axes=(2, 2, 2)))
    for key in ("loss", "adaptive_dice_loss", "grad_norm"):
        np.testing.assert_allclose(metrics[key], expected_metrics[key], rtol=1e-5, err_msg=key)
    for what in ("params", "opt_state", "batch_stats"):
        assert_trees_close(state[what], expected[what], rtol=1e-5, atol=1e-6, what=what)
    moved = jax.tree.map(lambda a, b: float(np.abs(a - b).max()), state["batch_stats"],
                         state0["batch_stats"])
    assert min(jax.tree.leaves(moved)) > 0
    assert _ops(compiled.as_text(), "collective-permute"), "no halo exchange"
