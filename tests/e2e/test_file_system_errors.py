"""File-system failures end a command with one line, no traceback, and lose nothing: a full
disk during training, a file where the workdir or the output folder should be."""

import shutil
import subprocess
import sys

import pytest

from jaxdet.config.loader import dump_config

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("e2e")]


def _jaxdet(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "jaxdet.cli.main", *args], capture_output=True,
                          text=True, timeout=timeout)


def _message_lines(stderr: str) -> list[str]:
    """stderr without progress-bar redraws and the dataset summary."""
    lines = [x.split("]")[-1] if x.startswith(("train:", "eval:")) else x
             for x in stderr.replace("\r", "\n").splitlines()]
    return [x for x in lines if x.strip() and not x.startswith(("INFO", "WARNING", "  "))]


@pytest.fixture
def tiny_file(tiny_config, tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(dump_config(tiny_config))
    return path


def test_a_file_where_the_workdir_should_be(tiny_file, tmp_path):
    blocker = tmp_path / "run"
    blocker.write_text("not a folder")
    done = _jaxdet("train", "--config", str(tiny_file), "--workdir", str(blocker), "--no-eval")
    assert done.returncode == 1
    assert _message_lines(done.stderr) == [
        f"error: File exists: {blocker}; a file stands where a folder is needed"]
    assert blocker.read_text() == "not a folder"


@pytest.fixture
def small_disk(tmp_path):
    """A 20 MB tmpfs: two of the tiny run's 8 MB checkpoints fit (skips where mounting is
    not permitted)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mount)],
            capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    yield mount
    if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)  # busy: detach it


def test_a_full_disk_during_training_is_one_line(tiny_file, small_disk):
    workdir = small_disk / "run"
    done = _jaxdet("train", "--config", str(tiny_file), "--workdir", str(workdir), "--no-eval",
                   "--set", "train.num_steps=60", "--set", "train.checkpoint_every=1",
                   "--set", "train.keep_checkpoints=100")
    assert done.returncode == 1
    lines = _message_lines(done.stderr)
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert lines[0].startswith(("error: the disk is full", "error: No space left on device"))
    assert "run the same command" in lines[0]
    from jaxdet.train.checkpoint import Checkpointer

    with Checkpointer(workdir / "checkpoints") as ckpt:  # what was written is whole
        steps = ckpt.all_steps()
        assert steps and ckpt.latest_intact_step() == steps[-1]
