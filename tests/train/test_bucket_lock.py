"""The training lock of a workdir in a bucket (on the GCS emulator): a second run is refused
in one line naming the first; a released lock, a lock whose process is gone from this host and
a lock without a heartbeat past the stale time are taken over; the holder's heartbeat moves."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from jaxdet import files
from jaxdet.files import exclusive
from jaxdet.train.bucket_lock import hold_bucket_workdir
from jaxdet.train.workdir_lock import WorkdirBusy


def _holder(url: str) -> dict:
    return json.loads(files.read_text(f"{url}/.jaxdet-train.lock"))


def test_a_second_run_is_refused_and_a_released_lock_is_taken(gcs, monkeypatch):
    monkeypatch.setenv("JAXDET_BUCKET_LOCK_STALE_S", "2")  # a heartbeat every 0.5 s
    url = f"gs://{gcs.bucket}/lock/held"
    with hold_bucket_workdir(url):
        first = _holder(url)
        with pytest.raises(WorkdirBusy) as refused, hold_bucket_workdir(url):
            pass
        message = str(refused.value)
        assert "\n" not in message and message.startswith(f"{url} is already being trained by "
                                                           f"process {first['pid']} on ")
        time.sleep(1.2)
        assert _holder(url)["heartbeat"] > first["heartbeat"]  # beating
    assert _holder(url)["released"]
    with hold_bucket_workdir(url):  # released: taken at once, without a warning
        assert not _holder(url)["released"]


def test_a_dead_holder_is_taken_over(gcs, monkeypatch, caplog):
    url = f"gs://{gcs.bucket}/lock/dead"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    record = {"pid": int(gone.stdout), "host": socket.gethostname(), "since": "earlier",
              "command": "jaxdet train", "heartbeat": time.time(), "released": False}
    exclusive.create_new(f"{url}/.jaxdet-train.lock", json.dumps(record).encode())
    with hold_bucket_workdir(url):  # same host, process gone: at once
        assert _holder(url)["pid"] != record["pid"]
    assert "on this host is gone" in caplog.text

    other_host = {**record, "host": "another-vm", "heartbeat": time.time() - 10}
    files.write_text(f"{url}/.jaxdet-train.lock", json.dumps(other_host))
    with pytest.raises(WorkdirBusy, match="another-vm"), hold_bucket_workdir(url):
        pass  # another machine's run, beating 10 s ago: alive at the default stale time
    monkeypatch.setenv("JAXDET_BUCKET_LOCK_STALE_S", "5")
    with hold_bucket_workdir(url):
        assert _holder(url)["host"] == socket.gethostname()
    assert "no heartbeat for 10 s" in caplog.text
