"""An S3 emulator for the suite: moto's server (``moto[server]`` from PyPI, the S3 REST API
that s3fs and boto3 speak) run as its own process on 127.0.0.1, started and stopped by the
``s3`` fixture (tests/conftest.py).

The clients find it through ``AWS_ENDPOINT_URL`` (botocore, hence s3fs), with made-up
credentials and region in the variables every AWS client reads.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from gcs_emulator import StoreEmulator, free_port

BUCKET = "jaxdet-test"


@dataclass
class S3Emulator(StoreEmulator):
    """The S3 emulator (``s3://`` buckets)."""

    scheme: ClassVar[str] = "s3"

    def env(self) -> dict[str, str]:
        """The variables a process needs to use this emulator."""
        return {"AWS_ENDPOINT_URL": self.url, "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def start(bucket: str = BUCKET, timeout_s: float = 30.0) -> S3Emulator:
    """Starts the emulator on a free port of 127.0.0.1, creates ``bucket`` (a PUT, as the S3
    API creates one) and returns when it answers."""
    exe = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
    port = free_port()
    process = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            request = urllib.request.Request(f"{url}/{bucket}", method="PUT")
            with urllib.request.urlopen(request, timeout=2):
                return S3Emulator(url, bucket, process)
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"the S3 emulator did not start on {url}") from None
            time.sleep(0.2)


def environ_for(emulator: S3Emulator) -> dict[str, str]:
    """``os.environ`` with the emulator's variables, for a subprocess."""
    return {**os.environ, **emulator.env()}
