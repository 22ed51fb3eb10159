"""The XLA:CPU options: convolutions go to Eigen, not YNNPACK, where the builders ask."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import pytest

from compile_settings import FAST_COMPILE_XLA_FLAGS, users_compile_env
from jaxdet.backends.cpu import compile_options as xla_cpu
from jaxdet.config.loader import load_config
from jaxdet.train import build as train_build

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU options")


_CHILD = """
import json, re, jax, jax.numpy as jnp, numpy as np
from compile_settings import FAST_COMPILE_XLA_FLAGS, users_compile_env
from jaxdet.backends.cpu import compile_options as xla_cpu
from jaxdet.train import build as train_build
from jaxdet.config.loader import load_config
def ynn_convolutions(hlo):
    bodies = dict(re.findall(r"\\n%(\\S+) [^\\n]*\\{\\n(.*?)\\n\\}", hlo, re.S))
    called = re.findall(r"fusion\\([^\\n]*calls=%([\\w.]+)[^\\n]*__ynn_fusion", hlo)
    return sum(" convolution(" in bodies.get(c, "") for c in called)
conv = lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
grad = jax.grad(lambda x, w: jnp.sum(conv(x, w) ** 2), argnums=(0, 1))
rng = np.random.default_rng(0)
x = jnp.asarray(rng.normal(size=(2, 32, 32, 64)), jnp.float32)
w = jnp.asarray(rng.normal(size=(3, 3, 64, 64)), jnp.float32) / 24
options = xla_cpu.cpu_compiler_options(eigen_convolutions=True)
default = jax.jit(grad).lower(x, w).compile()
eigen = jax.jit(grad, compiler_options=options).lower(x, w).compile()
diff = max(float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(a)))
           for a, b in zip(default(x, w), eigen(x, w)))
print(json.dumps({"options": options, "default": ynn_convolutions(default.as_text()),
                  "eigen": ynn_convolutions(eigen.as_text()), "diff": diff}))
"""


@pytest.mark.slow
def test_options_move_convolutions_to_eigen_with_the_same_result():
    # One CPU device in a fresh process: with the suite's 8 emulated devices XLA already keeps
    # convolutions out of YNNPACK, so the option's effect shows only in a process like a
    # user's.
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                         text=True, check=True).stdout.strip().splitlines()[-1]
    got = json.loads(out)
    assert got["options"] == {xla_cpu.YNN_FUSION_OPTION: xla_cpu.YNN_WITHOUT_CONVOLUTIONS}
    assert got["default"] == 3  # forward, input gradient, kernel gradient
    assert got["eigen"] == 0
    assert got["diff"] < 1e-4


def test_no_option_for_volumes_or_a_users_own_flag(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert xla_cpu.cpu_compiler_options(eigen_convolutions=False) is None
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=")
    assert xla_cpu.cpu_compiler_options(eigen_convolutions=True) is None


@pytest.mark.parametrize("config,eigen", [
    ("retinanet_resnet50_fpn_640", True),
    ("faster_rcnn_resnet50_v1_fpn_640", True),
    ("ssd_mobilenet_v2_320", False),
    ("efficientdet_d0", False),
])
def test_predict_gets_eigen_convolutions_for_resnet_backbones_only(config, eigen, monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    options = train_build.predict_compiler_options(load_config(config))
    assert options == ({xla_cpu.YNN_FUSION_OPTION: xla_cpu.YNN_WITHOUT_CONVOLUTIONS}
                       if eigen else None)


def test_the_suite_compiles_fast_and_its_canary_process_as_users_do():
    """The suite's own processes carry the fast-compile flags (unless
    JAXDET_TEST_USERS_COMPILE=1); ``users_compile_env``, which the SIGTERM-and-resume test
    gives its ``jaxdet train`` commands, carries none of them."""
    fast = set(FAST_COMPILE_XLA_FLAGS)
    suite = set(os.environ.get("XLA_FLAGS", "").split())
    if os.environ.get("JAXDET_TEST_USERS_COMPILE") == "1":
        assert not fast & suite
    else:
        assert fast <= suite
    assert not fast & set(users_compile_env().get("XLA_FLAGS", "").split())
