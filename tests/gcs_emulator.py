"""A Google Cloud Storage emulator for the suite: ``gcp-storage-emulator`` (from PyPI, the
JSON API that gcsfs and the Cloud client libraries speak) run as its own process on
127.0.0.1, started and stopped by the ``gcs`` fixture (tests/conftest.py).

The clients find it through ``STORAGE_EMULATOR_HOST`` (gcsfs, google-cloud-storage), which
the fixture sets for the test process and every process it starts; gcsfs' bucket-type probe
(a gRPC call the emulator does not serve) is turned off with
``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

BUCKET = "jaxdet-test"
ENV = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class StoreEmulator:
    """A running object-store emulator: ``url`` (http://127.0.0.1:PORT), ``bucket`` (created
    empty), its ``process``; ``scheme`` is the URL scheme its buckets take."""

    url: str
    bucket: str
    process: subprocess.Popen
    scheme: ClassVar[str] = ""

    def upload(self, local: Path, prefix: str) -> str:
        """Copies a local file or folder to ``<scheme>://bucket/prefix``; returns that URL."""
        from jaxdet import files

        url = f"{self.scheme}://{self.bucket}/{prefix}"
        items = [local] if local.is_file() else sorted(p for p in local.rglob("*") if p.is_file())
        for item in items:
            target = url if local.is_file() else f"{url}/{item.relative_to(local).as_posix()}"
            files.write_bytes(target, item.read_bytes())
        return url

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


@dataclass
class GcsEmulator(StoreEmulator):
    """The GCS emulator (``gs://`` buckets)."""

    scheme: ClassVar[str] = "gs"

    def env(self) -> dict[str, str]:
        """The variables a process needs to use this emulator."""
        return {"STORAGE_EMULATOR_HOST": self.url, **ENV}


def start(bucket: str = BUCKET, timeout_s: float = 30.0) -> GcsEmulator:
    """Starts the emulator with ``bucket`` on a free port of 127.0.0.1 and waits until it
    answers."""
    exe = shutil.which("gcp-storage-emulator") or str(
        Path(sys.executable).with_name("gcp-storage-emulator"))
    port = free_port()
    process = subprocess.Popen(
        [exe, "start", "--host=127.0.0.1", f"--port={port}", "--in-memory",
         f"--default-bucket={bucket}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{url}/storage/v1/b/{bucket}", timeout=2):
                return GcsEmulator(url, bucket, process)
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"the GCS emulator did not start on {url}") from None
            time.sleep(0.2)


def environ_for(emulator: GcsEmulator) -> dict[str, str]:
    """``os.environ`` with the emulator's variables, for a subprocess."""
    return {**os.environ, **emulator.env()}
