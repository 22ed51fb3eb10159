"""A local "model zoo" for the suite: a real HTTP server on 127.0.0.1 serving
``<name>.tar.gz`` in the TF2 zoo's layout (``<name>/pipeline.config``,
``<name>/checkpoint/ckpt-0.*`` and ``checkpoint``, ``<name>/saved_model/``), built from the
SSD MobileNetV2 320 fixture whose checkpoint TensorFlow wrote (random weights). Point
``JAXDET_ZOO_URL`` at :attr:`LocalZoo.url`."""

from __future__ import annotations

import contextlib
import functools
import http.server
import shutil
import sys
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

FIXTURES = Path(__file__).parent / "interop" / "fixtures"
NAME = "ssd_mobilenet_v2_320x320_coco17_tpu-8"
MOBILENET = FIXTURES / f"tf_{NAME}"


@dataclass
class LocalZoo:
    """``url``: the base URL; ``model``: the model folder the tarball holds, unpacked;
    ``requests``: the paths asked for so far."""

    url: str
    model: Path
    requests: list[str] = field(default_factory=list)


def zoo_model_folder(into: Path) -> Path:
    """The fixture as a zoo model folder ``into/<NAME>``; returns it."""
    sys.path.insert(0, str(FIXTURES))
    from tf_fixture_values import rebuild_data

    model = into / NAME
    rebuild_data(MOBILENET, model / "checkpoint" / "ckpt-0")
    (model / "checkpoint" / "checkpoint").write_text('model_checkpoint_path: "ckpt-0"\n')
    shutil.copy(MOBILENET / "pipeline.config", model / "pipeline.config")
    (model / "saved_model").mkdir(exist_ok=True)
    (model / "saved_model" / "saved_model.pb").write_bytes(b"unused by jaxdet")
    return model


@contextlib.contextmanager
def serve_zoo(root: Path) -> Iterator[LocalZoo]:
    """Serves, from ``root``, ``<NAME>.tar.gz``, ``cut_off.tar.gz`` (its first half) and
    ``foreign.tar.gz`` (no pipeline.config) until the block ends."""
    model = zoo_model_folder(root / "unpacked")
    served = root / "served"
    served.mkdir()
    with tarfile.open(served / f"{NAME}.tar.gz", "w:gz") as archive:
        archive.add(model, arcname=NAME)
    whole = (served / f"{NAME}.tar.gz").read_bytes()
    (served / "cut_off.tar.gz").write_bytes(whole[: len(whole) // 2])
    with tarfile.open(served / "foreign.tar.gz", "w:gz") as archive:
        archive.add(model / "saved_model", arcname="foreign/saved_model")
    zoo = LocalZoo("", model)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            zoo.requests.append(self.path)
            super().do_GET()

        def log_message(self, *args):  # quiet
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(served)))
    zoo.url = f"http://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield zoo
    finally:
        server.shutdown()
        server.server_close()


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: a machine without network, as a download
    sees it."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/tf2"
