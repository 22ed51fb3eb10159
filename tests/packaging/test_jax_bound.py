"""jax and jaxlib are bounded in pyproject.toml because the CPU backend sets an experimental
XLA option (``backends.cpu.compile_options``). The installed pair must lie within the bound,
and the option must still be accepted by the installed jaxlib under the name and values jaxdet
sets: a jax release that renames or drops it fails here, before the bound is raised."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from jaxdet.backends.cpu import compile_options

REPO = Path(__file__).parents[2]


def _requirement(name: str) -> Requirement:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (found,) = [Requirement(r) for r in project["dependencies"] if Requirement(r).name == name]
    return found


@pytest.mark.parametrize("name", ["jax", "jaxlib"])
def test_installed_jax_lies_within_the_tested_bound(name):
    requirement = _requirement(name)
    upper = [s for s in requirement.specifier if s.operator == "<"]
    assert upper, f"pyproject gives {name} no upper bound: {requirement}"
    installed = Version(importlib.metadata.version(name))
    assert requirement.specifier.contains(installed, prereleases=True), (
        f"{name} {installed} is outside pyproject's {requirement.specifier}")


def _compile(options):
    return jax.jit(lambda x: jnp.tanh(x) @ x).lower(jnp.ones((8, 8), jnp.float32)).compile(
        options)


def test_the_experimental_option_is_accepted_by_the_installed_jaxlib():
    if jax.default_backend() != "cpu":
        pytest.skip("the option is for XLA:CPU")
    options = compile_options.cpu_compiler_options(eigen_convolutions=True)
    assert options == {compile_options.YNN_FUSION_OPTION:
                       compile_options.YNN_WITHOUT_CONVOLUTIONS}
    compiled = _compile(options)  # raises if the name or any of its values is unknown
    assert float(compiled(jnp.ones((8, 8), jnp.float32))[0, 0]) == pytest.approx(
        8 * float(jnp.tanh(1.0)), rel=1e-6)
    # XLA checks both the name and the values, so acceptance above means something:
    with pytest.raises(Exception, match="No such compile option"):
        _compile({compile_options.YNN_FUSION_OPTION + "_renamed": "x"})
    with pytest.raises(Exception, match="not a valid enum value"):
        _compile({compile_options.YNN_FUSION_OPTION: "LIBRARY_FUSION_TYPE_RENAMED"})
