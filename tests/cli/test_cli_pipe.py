"""A command whose reader stops early (``jaxdet configs | head -1``) ends quietly: exit 0 and
nothing on stderr, not "error: Broken pipe"."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_a_closed_pipe_ends_the_command_quietly():
    command = subprocess.Popen([sys.executable, "-m", "jaxdet.cli.main", "configs"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    command.stdout.close()  # before the command prints anything: its first line finds no reader
    errors = command.stderr.read()
    assert command.wait(timeout=120) == 0
    assert errors == b""
