"""Compiled programs kept on disk between runs: where they go (and how to turn it off), and a
second process reading back what the first compiled, with the same result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxdet.backends.compile_cache import compilation_cache_folder

_PROCESS = """
import json, jax, jax.numpy as jnp
from jaxdet.backends.compile_cache import use_compilation_cache
events = []
jax.monitoring.register_event_listener(lambda event, **_: events.append(event))
folder = use_compilation_cache()
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
out = jax.jit(lambda x: jnp.sin(x) @ x.T)(jnp.arange(12.0).reshape(3, 4))
print(json.dumps({"folder": str(folder), "value": out.tolist(),
                  "hits": events.count("/jax/compilation_cache/cache_hits")}))
"""


def _fresh_process(env: dict) -> dict:
    env = {k: v for k, v in {**os.environ, **env}.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    done = subprocess.run([sys.executable, "-c", _PROCESS], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "stderr": done.stderr}


@pytest.mark.parametrize("given, expected", [
    ({"JAXDET_COMPILATION_CACHE": "/data/xla"}, "/data/xla"),
    ({"JAXDET_CACHE_DIR": "/data/cache"}, "/data/cache/jax"),
    ({"HOME": "/home/u"}, "/home/u/.cache/jaxdet/jax"),
    ({"JAXDET_COMPILATION_CACHE": "off"}, None),
])
def test_where_compiled_programs_are_kept(monkeypatch, given, expected):
    for key in ("JAXDET_COMPILATION_CACHE", "JAXDET_CACHE_DIR"):
        monkeypatch.delenv(key, raising=False)
    for key, value in given.items():
        monkeypatch.setenv(key, value)
    folder = compilation_cache_folder()
    assert (None if folder is None else str(folder)) == expected


@pytest.mark.slow
def test_a_second_process_reads_back_what_the_first_compiled(tmp_path):
    env = {"JAXDET_COMPILATION_CACHE": str(tmp_path / "xla"), "JAX_PLATFORMS": "cpu"}
    first = _fresh_process(env)
    assert first["folder"] == str(tmp_path / "xla") and first["hits"] == 0
    assert any((tmp_path / "xla").iterdir())
    second = _fresh_process(env)
    assert second["hits"] >= 1 and second["value"] == first["value"]


@pytest.mark.slow
def test_turned_off_nothing_is_kept(tmp_path):
    result = _fresh_process({"JAXDET_COMPILATION_CACHE": "off", "HOME": str(tmp_path),
                             "JAX_PLATFORMS": "cpu"})
    assert result["folder"] == "None" and not Path(tmp_path, ".cache").exists()


@pytest.mark.slow
def test_programs_kept_without_a_size_limit_do_not_break_later_writes(tmp_path):
    # What a process with JAX_COMPILATION_CACHE_DIR (no size limit) leaves: no -atime file.
    folder = tmp_path / "xla"
    folder.mkdir()
    (folder / "jit_old-0123abcd-cache").write_bytes(b"x" * 100)
    result = _fresh_process({"JAXDET_COMPILATION_CACHE": str(folder), "JAX_PLATFORMS": "cpu"})
    assert "Error writing persistent compilation cache" not in result["stderr"]
    assert (folder / "jit_old-0123abcd-atime").read_bytes() == bytes(8)  # oldest: goes first
    kept = [p.name for p in folder.glob("*-cache") if not p.name.startswith("jit_old")]
    assert kept and all((folder / (n.removesuffix("-cache") + "-atime")).exists() for n in kept)
