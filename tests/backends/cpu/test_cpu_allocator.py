"""The allocator restart of the jaxdet command (``backends.cpu.allocator``): huge pages and the
block cache that keeps XLA's per-step buffers mapped."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from jaxdet.backends.cpu import allocator as ca

GLIBC = platform.libc_ver()[0] == "glibc"


def test_thp_mode_reads_the_bracketed_word(tmp_path):
    setting = tmp_path / "enabled"
    setting.write_text("always [madvise] never\n")
    assert ca.transparent_huge_pages_mode(setting) == "madvise"
    setting.write_text("[always] madvise never\n")
    assert ca.transparent_huge_pages_mode(setting) == "always"
    assert ca.transparent_huge_pages_mode(tmp_path / "absent") is None


def test_has_tunable_looks_at_the_name_not_a_substring():
    assert ca.has_tunable({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"})
    assert ca.has_tunable({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"})
    assert not ca.has_tunable({"GLIBC_TUNABLES": "glibc.malloc.hugetlb_x=1"})
    assert not ca.has_tunable({})


@pytest.mark.skipif(not GLIBC, reason="the tunable is glibc's")
def test_environment_adds_the_tunable_and_keeps_the_others():
    env = ca.environment_with_huge_pages(
        {"PATH": "/bin", "GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, thp_mode="madvise")
    assert env == {"PATH": "/bin",
                   "GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"}
    assert ca.environment_with_huge_pages({}, thp_mode="always")["GLIBC_TUNABLES"] == ca.TUNABLE


def test_no_restart_when_set_turned_off_or_useless():
    # a user's own choice (even =0) is kept; JAXDET_HUGE_PAGES=0 turns the restart off; a
    # kernel without huge pages gains nothing
    assert ca.environment_with_huge_pages(
        {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, thp_mode="madvise") is None
    assert ca.environment_with_huge_pages({ca.OPT_OUT: "0"}, thp_mode="madvise") is None
    assert ca.environment_with_huge_pages({}, thp_mode="never") is None
    assert ca.environment_with_huge_pages({}, thp_mode="") is None  # no such file: not Linux


_CHILD = ("import os, sys; from jaxdet.backends.cpu.allocator import reexec_with_fast_allocator; "
          "reexec_with_fast_allocator(); print(os.environ.get('GLIBC_TUNABLES', ''), sys.argv[1:])")


@pytest.mark.skipif(not GLIBC or ca.transparent_huge_pages_mode() not in ("always", "madvise"),
                    reason="needs glibc and transparent huge pages")
@pytest.mark.slow
def test_reexec_restarts_the_same_command_with_the_tunable():
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path), ca.BLOCK_CACHE_OPT_OUT: "0"}
    out = subprocess.run([sys.executable, "-c", _CHILD, "--flag", "x"], env=env,
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == f"{ca.TUNABLE} ['--flag', 'x']"
    out = subprocess.run([sys.executable, "-c", _CHILD], env={**env, ca.OPT_OUT: "0"},
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_block_cache_goes_first_in_ld_preload_once(tmp_path):
    lib = tmp_path / "block_cache.so"
    env = ca.environment_with_block_cache({"LD_PRELOAD": "/x/a.so b.so"}, lib)
    assert env["LD_PRELOAD"] == f"{lib}:/x/a.so:b.so"
    assert ca.environment_with_block_cache(env, lib) is None  # already there: no restart loop
    assert ca.environment_with_block_cache({}, None) is None  # could not be built
    assert ca.environment_with_block_cache({ca.BLOCK_CACHE_OPT_OUT: "0"}, lib) is None
    both = ca.fast_allocator_environment({}, thp_mode="madvise", library=lib)
    if GLIBC:
        assert both == {"LD_PRELOAD": str(lib), "GLIBC_TUNABLES": ca.TUNABLE}
    assert ca.fast_allocator_environment(both, thp_mode="madvise", library=lib) is None


@pytest.mark.slow
def test_block_cache_build_failure_is_none_not_an_error(tmp_path):
    assert ca.block_cache_library(tmp_path, compiler=str(tmp_path / "no-such-cc")) is None
    assert ca.block_cache_library(tmp_path, source=tmp_path / "absent.c") is None
    assert list(tmp_path.iterdir()) == []  # no partial file left behind


# A child process with the shim preloaded: allocations through glibc's public entry points
# (what XLA's aligned allocator and numpy call), addresses and contents compared.
_PROBE = r"""
import ctypes, json, os
libc = ctypes.CDLL(None)
libc.malloc.restype = libc.realloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.realloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
libc.malloc_usable_size.restype = ctypes.c_size_t
libc.malloc_usable_size.argtypes = [ctypes.c_void_p]
MB = 1 << 20
def aligned(size):
    p = ctypes.c_void_p()
    assert libc.posix_memalign(ctypes.byref(p), 64, size) == 0
    return p.value
def mapped(address):
    for line in open("/proc/self/maps"):
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if lo <= address < hi:
            return True
    return False
out = {}
a = aligned(40 * MB)
ctypes.memset(a, 7, 40 * MB)
out["usable"] = libc.malloc_usable_size(a)
libc.free(a)
b = aligned(40 * MB)
out["same_address"] = a == b
out["kept_contents"] = ctypes.string_at(b + 40 * MB - 3, 3) == b"\x07\x07\x07"
c = libc.malloc(64 * MB)
out["other_size_new_block"] = c not in (a, b)
ctypes.memset(c, 5, 64 * MB)
d = libc.realloc(c, 100 * MB)
out["realloc_kept"] = ctypes.string_at(d + 64 * MB - 2, 2) == b"\x05\x05"
small = libc.malloc(1000)
out["small_usable"] = libc.malloc_usable_size(small) >= 1000
libc.free(small)
libc.free(b)   # cached: 40 MB block
libc.free(d)   # cached: 100 MB block; the limit of one block unmaps the 40 MB one
out["oldest_unmapped"] = not mapped(b)
out["newest_kept"] = mapped(d)
pid = os.fork()  # the cache's lock is held across fork; the child gets its own copy
if pid == 0:
    e = libc.malloc(100 * MB)
    os._exit(0 if e == d else 3)
out["fork_child_reused"] = os.waitpid(pid, 0)[1] == 0
import numpy as np
x = np.arange(30_000_000, dtype=np.float64)
out["numpy_sum"] = float((x * 2).sum())
print(json.dumps(out))
"""


@pytest.mark.skipif(not GLIBC, reason="the block cache wraps glibc's malloc")
@pytest.mark.slow
def test_block_cache_reuses_freed_large_blocks_and_passes_the_rest_to_glibc(tmp_path):
    lib = ca.block_cache_library(tmp_path)
    if lib is None:
        pytest.skip("no C compiler to build the block cache")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path), "LD_PRELOAD": str(lib),
           "JAXDET_BLOCK_CACHE_BLOCKS": "1", "JAXDET_BLOCK_CACHE_MIN_MB": "32"}
    done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                          text=True, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out.pop("usable") == 40 << 20  # rounded up to whole 2 MiB pages
    assert out.pop("numpy_sum") == 2 * sum(range(30_000_000))
    assert all(out.values()), out
    assert ca.block_cache_library(tmp_path) == lib  # built once, then found by its hash


_RACE = """
import ctypes, json, threading, time
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
MB = 1 << 20
first = libc.malloc(40 * MB)
threading.Timer(0.02, libc.free, (first,)).start()  # given back 20 ms from now
t0 = time.perf_counter()
second = libc.malloc(40 * MB)   # waits for it instead of mapping a new block
waited = time.perf_counter() - t0
t0 = time.perf_counter()
third = libc.malloc(40 * MB)    # the one block is in use and stays so: a new one after the wait
gave_up = time.perf_counter() - t0
print(json.dumps({"reused": second == first, "waited": waited, "new_block": third != second,
                  "gave_up": gave_up}))
"""


@pytest.mark.skipif(not GLIBC, reason="the block cache wraps glibc's malloc")
@pytest.mark.parametrize("wait_ms", [200, 0])
@pytest.mark.slow
def test_a_request_waits_briefly_for_a_block_of_its_size_in_use(tmp_path, wait_ms):
    """XLA frees a step's temporary buffer just after its outputs are ready, and the next call
    may ask for one first: the cache waits (up to JAXDET_BLOCK_CACHE_WAIT_MS) for the block in
    use rather than mapping, faulting and zeroing a new one; with the wait turned off, or when
    the block stays in use, a new block is mapped."""
    lib = ca.block_cache_library(tmp_path)
    if lib is None:
        pytest.skip("no C compiler to build the block cache")
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(lib),
           "JAXDET_BLOCK_CACHE_WAIT_MS": str(wait_ms)}
    done = subprocess.run([sys.executable, "-c", _RACE], env=env, capture_output=True,
                          text=True, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["new_block"]
    if wait_ms:
        assert out["reused"] and 0.01 < out["waited"] < 0.19
        assert 0.15 < out["gave_up"] < 1.0
    else:
        assert not out["reused"] and out["waited"] < 0.015 and out["gave_up"] < 0.1


@pytest.mark.skipif(not GLIBC, reason="the block cache wraps glibc's malloc")
@pytest.mark.slow
def test_jitted_computation_under_the_block_cache_matches_numpy(tmp_path):
    lib = ca.block_cache_library(tmp_path)
    if lib is None:
        pytest.skip("no C compiler to build the block cache")
    code = ("import jax, jax.numpy as jnp, numpy as np\n"
            "x = np.linspace(-1, 1, 3 * 2**22, dtype=np.float32).reshape(3, -1)\n"
            "f = jax.jit(lambda a: jnp.tanh(a * 3.0).cumsum(axis=1)[:, -1] + jnp.sin(a).sum(1))\n"
            "for _ in range(3): y = np.asarray(f(x))\n"
            "ref = np.tanh(x.astype(np.float64) * 3).sum(1) + np.sin(x.astype(np.float64)).sum(1)\n"
            "print(np.abs(y - ref).max() / np.abs(ref).max())")
    env = {**os.environ, "LD_PRELOAD": str(lib), "JAXDET_BLOCK_CACHE_MIN_MB": "8"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True)
    assert float(done.stdout.strip().splitlines()[-1]) < 1e-4


@pytest.mark.skipif(not GLIBC, reason="the block cache wraps glibc's malloc")
@pytest.mark.slow
def test_reexec_preloads_the_block_cache_built_in_the_cache_dir(tmp_path):
    if ca.block_cache_library(tmp_path / "probe") is None:
        pytest.skip("no C compiler to build the block cache")
    child = ("import os; from jaxdet.backends.cpu.allocator import reexec_with_fast_allocator; "
             "reexec_with_fast_allocator(); print(os.environ.get('LD_PRELOAD', ''))")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": ":".join(sys.path),
           "XDG_CACHE_HOME": str(tmp_path), ca.OPT_OUT: "0"}
    out = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out.startswith(str(tmp_path / "jaxdet" / "block_cache-")) and out.endswith(".so")
