"""Test-wide settings (a persistent JAX compilation cache, CPU-only execution, 8 emulated CPU
devices for the sharding tests) and the tiny config that trains in seconds: 64x64 generated
shapes, ResNet-18 x0.25, FPN P3-P5 of depth 16, on one device (``parallel.data=1``).

Fixtures shared by several folders: ``run`` (a function eagerly and jitted), ``build_fast``
(a model with host-drawn weights), ``shapes_dir`` (a tiny generated data set), ``trained`` (a
tiny trained workdir, with its config ``trained_config``), the bucket emulators ``gcs`` and
``s3``."""

import contextlib
import functools
import gc
import os

from compile_settings import compile_settings_line, use_fast_compile_settings

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# XLA:CPU's cheaper settings for the tests (see compile_settings.py), before any computation
FAST_COMPILE = use_fast_compile_settings()
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", os.path.expanduser("~/.cache/jaxdet/jax")
)

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from flax import nnx  # noqa: E402

from jaxdet.config.loader import load_config  # noqa: E402

# the quick / slow tiers and the check that keeps each test in its own (suite_tiers.py)
pytest_plugins = ["suite_tiers", "pytester"]

jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
# Every compilation is cached, the op-by-op ones of eager code too (17 ms each; an eager
# Faster R-CNN train step compiles ~1,450): a warm run then reads them back. The variable is for
# the `jaxdet` processes the end-to-end tests start.
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
jax.config.update("jax_persistent_cache_min_compile_time_secs",
                  float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))
# Eight CPU devices, as XLA_FLAGS=--xla_force_host_platform_device_count=8 would give; a
# computation not placed on a mesh still runs on the first one.
NUM_EMULATED_DEVICES = 8
jax.config.update("jax_num_cpu_devices", NUM_EMULATED_DEVICES)

# Python's collector less often: tracing and lowering allocate millions of short-lived
# objects, and a cold run spent ~5% of its time collecting them (the same tests, 65.0 s
# against 68.7 s; memory unchanged); what the imports made is frozen out of every collection
gc.freeze()
gc.set_threshold(20_000, 20, 20)


TINY = [
    "name=tiny",
    "model.backbone.depth_multiplier=0.25",
    "model.neck.depth=16",
    # two pyramid levels (P3-P4) instead of three: each train step ~20% faster to compile
    "model.neck.max_level=4",
    "model.anchors.max_level=4",
    "model.head.depth=16",
    "model.head.num_layers_before_predictor=1",
    "model.post_processing.pre_nms_top_k=64",
    "model.post_processing.score_threshold=0.0",
    "model.post_processing.max_detections_per_class=10",
    "model.post_processing.max_total_detections=10",
    "data.resizer.height=64",
    "data.resizer.width=64",
    "data.train.num_images=24",
    "data.train.image_size=[64, 64]",
    "data.train.output_dir=data/train",
    "data.eval.num_images=10",
    "data.eval.image_size=[64, 80]",
    "data.eval.output_dir=data/eval",
    "data.max_number_of_boxes=8",
    "train.batch_size=4",
    "train.num_steps=6",
    "train.checkpoint_every=3",
    "train.log_every=1",
    "train.learning_rate.warmup_steps=2",
    "eval.batch_size=4",
    "parallel.data=1",
]


def pytest_report_header(config: pytest.Config) -> str:
    return compile_settings_line(FAST_COMPILE)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a pytest-xdist worker under ``--dist loadgroup``: stop if a test marked
    ``xdist_group`` did not get its group suffix. (pytest 9.2 made xdist 3.8 drop the marks
    silently: tests that share a compiled model then run on both workers, each compiling it.)"""
    if not getattr(config.option, "loadgroup", False):
        return
    lost = [item.nodeid for item in items
            if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(
            f"pytest-xdist did not group {len(lost)} tests marked xdist_group (e.g. {lost[0]}): "
            "this pytest / pytest-xdist pair does not support --dist loadgroup; install the "
            "versions pyproject.toml's test extra pins")


@pytest.fixture(scope="session")
def tiny_overrides() -> list[str]:
    return list(TINY)


@pytest.fixture(scope="session")
def tiny_config():
    return load_config("shapes_demo", TINY)


@pytest.fixture(scope="session")
def trained_config(tiny_overrides):
    """The suite's tiny config drawing 2 eval samples: the config of ``trained``."""
    return load_config("shapes_demo", [*tiny_overrides, "eval.num_visualizations=2"])


@pytest.fixture(scope="session")
def trained(trained_config, tmp_path_factory):
    """Workdir trained 6 steps; its final eval wrote eval/step_6/{detections.json,samples.png}.
    Its tests share one ``xdist_group("predict")``, so one worker trains it once."""
    from jaxdet.jobs import runs

    workdir = tmp_path_factory.mktemp("tiny_run")
    runs.train(trained_config, workdir, progress=False)
    return workdir


@pytest.fixture(scope="session")
def shapes_dir(tmp_path_factory):
    """12 generated shapes images of 48..64 px, 3 classes, generated once per session."""
    from jaxdet.data.shapes import generate_shapes

    out = tmp_path_factory.mktemp("shapes")
    generate_shapes(out, 12, image_size=((48, 64), (48, 64)), seed=3, num_classes=3,
                    max_objects=4)
    return out


@pytest.fixture(params=["eager", "jit"])
def run(request):
    """``run(fn, *arrays, **static)``: ``fn(*arrays, **static)`` eagerly or jitted.

    Eager mode runs under ``jax.disable_jit()`` (loops run as Python, every op dispatched
    one by one); jit mode closes the keyword arguments over as static values. Outputs come
    back as numpy (pytrees preserved).
    """

    def _run(fn, *args, **static):
        if request.param == "jit":
            out = jax.jit(functools.partial(fn, **static))(*args)
        else:
            with jax.disable_jit():
                out = fn(*args, **static)
        return jax.tree.map(np.asarray, out)

    _run.mode = request.param
    return _run


def _build_fast(factory, seed: int = 0):
    """``factory()`` with host-side random weights: He-normal kernels, BatchNorm scale/var
    in [0.5, 1.5], bias/mean in [-0.1, 0.1].

    Building a model for real compiles one random-number program per parameter shape (or one
    large init program under jit), which costs seconds per model on a small CPU. Tests that
    only need *some* non-degenerate weights build the model abstractly (``nnx.eval_shape``)
    and fill it from numpy; tests about initial values build for real."""
    graphdef, state = nnx.split(nnx.eval_shape(factory))
    rng = np.random.default_rng(seed)
    for path, var in nnx.to_flat_state(state):
        shape, dtype = var.shape, var.dtype
        name = path[-1]
        if name == "kernel":
            fan_in = int(np.prod(shape[:-1]))
            value = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
        elif name in ("scale", "var", "edge_weights"):
            value = rng.uniform(0.5, 1.5, shape)
        elif name in ("bias", "mean"):
            value = rng.uniform(-0.1, 0.1, shape)
        elif isinstance(var, nnx.RngKey):
            var.set_value(jax.random.key(seed))
            continue
        elif isinstance(var, nnx.RngCount):
            value = np.zeros(shape, dtype)
        else:
            raise AssertionError(f"build_fast does not know how to fill {path}")
        var.set_value(jax.numpy.asarray(value, dtype))
    return nnx.merge(graphdef, state)


@pytest.fixture(scope="session")
def build_fast():
    """The :func:`_build_fast` helper: ``build_fast(factory, seed=0) -> module``."""
    return _build_fast


@contextlib.contextmanager
def _emulator_in_environment(emulator):
    """``emulator`` (a started store emulator) with this process' environment pointed at it
    for the block; stopped and the environment restored at its end."""
    saved = {k: os.environ.get(k) for k in emulator.env()}
    os.environ.update(emulator.env())
    try:
        yield emulator
    finally:
        emulator.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def gcs():
    """A GCS emulator on 127.0.0.1 for the whole session (tests/gcs_emulator.py), with this
    process' environment pointed at it; stopped at the end."""
    import gcs_emulator

    with _emulator_in_environment(gcs_emulator.start()) as emulator:
        yield emulator


@pytest.fixture(scope="session")
def s3():
    """An S3 emulator on 127.0.0.1 for the whole session (tests/s3_emulator.py), with this
    process' environment pointed at it; stopped at the end."""
    pytest.importorskip("s3fs")
    import s3_emulator

    with _emulator_in_environment(s3_emulator.start()) as emulator:
        yield emulator
