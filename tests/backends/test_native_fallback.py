"""Without a working C / C++ compiler, jaxdet's native parts (the block cache, the XLA:CPU
kernels, the image resampler) fall back to slower code: one WARNING per machine names each part
and what it costs, and later processes on that machine stay quiet."""

from __future__ import annotations

import logging
import os
import platform
import subprocess
import sys

import pytest

from jaxdet.backends import native_build

# What a user's process does: the allocator hint of a CPU train run, the kernels a traced step
# asks for, the loader's resampler; then prints whether each native part is in use.
CHILD = """
import logging
logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
from jaxdet.backends.cpu import allocator, kernels
from jaxdet.data import resample
allocator.hint()
print("in use:", kernels.available(), resample.native_available())
"""


def _run(cache, **env_changes) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("JAXDET_") and k not in ("LD_PRELOAD",)}
    env.update(XDG_CACHE_HOME=str(cache), **env_changes)
    return subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=300)


def _applying_parts() -> list[native_build.NativePart]:
    glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    return [p for p in native_build.PARTS if glibc or not p.glibc_only]


@pytest.mark.slow
def test_a_missing_compiler_is_one_warning_per_machine(tmp_path):
    missing = {"CC": str(tmp_path / "no-such-cc"), "CXX": str(tmp_path / "no-such-c++")}
    first = _run(tmp_path / "cache", **missing)
    assert first.returncode == 0, first.stderr
    assert "in use: False False" in first.stdout  # both fell back, and nothing crashed
    warnings = [ln for ln in first.stderr.splitlines() if ln.startswith("WARNING")]
    assert len(warnings) == 1, first.stderr
    (line,) = warnings
    for part in _applying_parts():
        assert f"{part.what} (no {part.language} compiler: {part.compiler_variable}=" in line
        assert part.fallback in line  # what runs instead, and what it costs
    assert "shown once per machine" in line and str(tmp_path / "cache") in line

    again = _run(tmp_path / "cache", **missing)  # the same machine: nothing more to say
    assert again.returncode == 0 and "in use: False False" in again.stdout
    assert "WARNING" not in again.stderr, again.stderr

    elsewhere = _run(tmp_path / "other-cache", **missing)  # another machine's cache warns
    assert sum(ln.startswith("WARNING") for ln in elsewhere.stderr.splitlines()) == 1


def test_parts_turned_off_or_built_are_not_named(tmp_path, monkeypatch, caplog):
    """A part its variable turns off is not a fallback to warn about; neither is one already
    built in the cache; the warning names only the part that was tried and failed."""
    monkeypatch.setattr(native_build, "_failed", {})
    monkeypatch.setattr(native_build, "_reported", set())
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    monkeypatch.setenv("JAXDET_NATIVE_RESAMPLE", "0")
    monkeypatch.delenv("JAXDET_CPU_KERNELS", raising=False)
    monkeypatch.delenv("JAXDET_BLOCK_CACHE", raising=False)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / f"block_cache-{platform.machine()}-0123456789ab.so").touch()  # built before
    with caplog.at_level(logging.WARNING, logger=native_build.__name__):
        native_build.report_fallback("cpu_kernels", directory=cache)
        native_build.report_fallback("cpu_kernels", directory=cache)  # once per process too
    (record,) = caplog.records
    assert "jaxdet's XLA:CPU kernels" in record.message
    assert "1 of its native parts" in record.message
    assert "resampler" not in record.message and "block cache" not in record.message
    assert len(list(cache.glob("fallback-warned-*"))) == 1


@pytest.mark.parametrize("failure", ["source", "build"])
@pytest.mark.slow
def test_a_failed_build_is_named_as_such(tmp_path, monkeypatch, caplog, failure):
    """A compiler that exists but cannot build the source: the warning says the build failed
    (not that a compiler is missing) and where to see the compiler's errors."""
    monkeypatch.setattr(native_build, "_failed", {})
    monkeypatch.setattr(native_build, "_reported", set())
    monkeypatch.setattr(native_build, "_why", {})
    fake = tmp_path / "cc"  # a "compiler" that always fails
    fake.write_text("#!/bin/sh\necho 'error: no' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    source = tmp_path / "resample.c"
    if failure == "build":
        source.write_text("int x;\n")
    got = native_build.cached_library(source, "resample", str(fake), ["-shared"],
                                      directory=tmp_path / "cache")
    assert got is None and not list((tmp_path / "cache").glob("*.so"))
    with caplog.at_level(logging.WARNING, logger=native_build.__name__):
        native_build.report_fallback("resample", directory=tmp_path / "cache")
    message = caplog.records[-1].message
    if failure == "build":
        assert f"image resampler ({fake} failed to build it)" in message
        assert "jaxdet -v shows the build errors" in message
    else:
        assert "image resampler (its source is missing" in message
