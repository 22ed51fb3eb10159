"""The huge-page restart of the jaxdet command (``jaxdet.cpu_allocator``)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from jaxdet import cpu_allocator as ca

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


_CHILD = ("import os, sys; from jaxdet.cpu_allocator import reexec_with_huge_pages; "
          "reexec_with_huge_pages(); print(os.environ.get('GLIBC_TUNABLES', ''), sys.argv[1:])")


@pytest.mark.skipif(not GLIBC or ca.transparent_huge_pages_mode() not in ("always", "madvise"),
                    reason="needs glibc and transparent huge pages")
def test_reexec_restarts_the_same_command_with_the_tunable():
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    out = subprocess.run([sys.executable, "-c", _CHILD, "--flag", "x"], env=env,
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == f"{ca.TUNABLE} ['--flag', 'x']"
    out = subprocess.run([sys.executable, "-c", _CHILD], env={**env, ca.OPT_OUT: "0"},
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
