"""One training run per workdir: a second one is refused in one line naming the holder, before
anything in the workdir changes; the lock dies with its process, SIGKILL included."""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from jaxdet.cli.main import main
from jaxdet.train.workdir_lock import LOCK_NAME, WorkdirBusy, hold_workdir

HOLD = """
import sys, time
from jaxdet.train.workdir_lock import hold_workdir
with hold_workdir(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_held_workdir_is_refused_naming_the_holder(tmp_path):
    with hold_workdir(tmp_path):
        with pytest.raises(WorkdirBusy, match=f"process {os.getpid()} on "
                                              f"{socket.gethostname()}"):
            with hold_workdir(tmp_path):
                pass
    with hold_workdir(tmp_path):  # released at the end of the block
        pass


@pytest.mark.slow
def test_the_lock_dies_with_a_killed_process(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(WorkdirBusy, match=f"process {proc.pid} "):
            with hold_workdir(tmp_path):
                pass
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    deadline = time.monotonic() + 10
    while True:  # the kernel drops the lock as the process goes
        try:
            with hold_workdir(tmp_path):
                break
        except WorkdirBusy:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_jaxdet_train_on_a_held_workdir_changes_nothing(tmp_path, tiny_overrides, capsys):
    workdir = tmp_path / "run"
    workdir.mkdir()
    with hold_workdir(workdir):
        code = main(["train", "--config", "shapes_demo", "--workdir", str(workdir),
                     *[f"--set={o}" for o in tiny_overrides]])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert len(err) == 1 and err[0].startswith(f"error: {workdir} is already being trained by "
                                               f"process {os.getpid()}")
    assert sorted(p.name for p in workdir.iterdir()) == [LOCK_NAME]  # no data, no config
