"""TF2 model-zoo tarballs: download once, unpack into a cache, return the model folder.

    folder = download_zoo_model("ssd_mobilenet_v2_320x320_coco17_tpu-8")
    detector = jaxdet.load(folder)            # pipeline.config + checkpoint/ckpt-0

A zoo model is ``<base>/<name>.tar.gz`` holding ``<name>/pipeline.config``,
``<name>/checkpoint/ckpt-0.{index,data-00000-of-00001}`` and a ``saved_model/`` (unused
here). ``<base>`` is the TF2 zoo's (:data:`ZOO_URL`), or ``$JAXDET_ZOO_URL`` (a mirror, or a
local server). The folder is cached under ``$JAXDET_CACHE_DIR/zoo`` (default
``~/.cache/jaxdet/zoo``): a second call reads nothing from the network. A download is written
beside the cache and moved into place only when unpacked whole, so an interrupted one leaves
nothing that looks like a model.

Failures are one line (:class:`ZooDownloadError`): no network (with the URL tried), a name the
zoo does not have (HTTP 404), a tarball that is cut off or has no ``pipeline.config``.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

log = logging.getLogger("jaxdet")

ZOO_URL = "http://download.tensorflow.org/models/object_detection/tf2/20200711"
CHUNK_BYTES = 1 << 20
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class ZooDownloadError(ConnectionError):
    """A zoo model that could not be downloaded or unpacked; the message says why in one
    line."""


def cache_root() -> Path:
    """Where downloads are kept: ``$JAXDET_CACHE_DIR``, else ``~/.cache/jaxdet``."""
    given = os.environ.get("JAXDET_CACHE_DIR")
    return Path(given) if given else Path.home() / ".cache" / "jaxdet"


def zoo_url(name: str) -> str:
    """The tarball URL of the zoo model ``name`` (``$JAXDET_ZOO_URL`` replaces the zoo's
    base)."""
    base = os.environ.get("JAXDET_ZOO_URL") or ZOO_URL
    return f"{base.rstrip('/')}/{name}.tar.gz"


def _is_model(folder: Path) -> bool:
    return (folder / "pipeline.config").is_file() and any(
        (folder / "checkpoint").glob("ckpt-*.index"))


def download_zoo_model(name: str, *, cache_dir: str | os.PathLike | None = None,
                       progress: bool = True, timeout_s: float = 30.0) -> Path:
    """The folder of the TF2 zoo model ``name`` (e.g.
    ``ssd_mobilenet_v2_320x320_coco17_tpu-8``), downloaded and unpacked on first use.

    Args:
      name: the zoo's model name (the tarball's name without ``.tar.gz``).
      cache_dir: where models are kept (default :func:`cache_root` ``/ "zoo"``).
      progress: a progress bar while downloading.
      timeout_s: seconds to wait for the server to answer.
    Returns:
      The model folder: ``pipeline.config`` and ``checkpoint/ckpt-0.*`` inside.
    Raises:
      ValueError: ``name`` is not a model name (a path or URL).
      ZooDownloadError: no network, no such model, or a broken tarball (one line).

    Example::

        folder = jaxdet.download_zoo_model("efficientdet_d0_coco17_tpu-32")
        found = jaxdet.load(folder).predict("street.jpg")
    """
    if not _NAME.match(name):
        raise ValueError(f"{name!r} is not a zoo model name (such as "
                         "'ssd_mobilenet_v2_320x320_coco17_tpu-8'); jaxdet.load takes a "
                         "model folder you already have")
    root = Path(cache_dir) if cache_dir is not None else cache_root() / "zoo"
    folder = root / name
    if _is_model(folder):
        return folder
    url = zoo_url(name)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=root) as scratch:
        tarball = Path(scratch) / f"{name}.tar.gz"
        _download(url, tarball, progress=progress, timeout_s=timeout_s)
        unpacked = _unpack(tarball, Path(scratch) / "unpacked", url)
        if folder.exists():  # an earlier partial model folder: replaced whole
            shutil.rmtree(folder)
        unpacked.replace(folder)
    log.info("zoo model %s unpacked into %s", name, folder)
    return folder


def _download(url: str, target: Path, *, progress: bool, timeout_s: float) -> None:
    from tqdm import tqdm

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer, open(target, "wb") as out:
            total = int(answer.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=f"downloading {target.name}",
                      disable=not progress) as bar:
                while chunk := answer.read(CHUNK_BYTES):
                    out.write(chunk)
                    bar.update(len(chunk))
            if total is not None and out.tell() != total:
                raise ZooDownloadError(f"{url}: the download stopped after {out.tell()} of "
                                       f"{total} bytes; run it again")
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise ZooDownloadError(
                f"{url}: the model zoo has no such model (HTTP 404); the names are the TF2 "
                "zoo's, e.g. ssd_mobilenet_v2_320x320_coco17_tpu-8") from None
        raise ZooDownloadError(f"{url}: the server answered HTTP {e.code} {e.reason}") from None
    except OSError as e:  # URLError, timeouts, refused and reset connections
        if isinstance(e, ZooDownloadError):
            raise
        reason = getattr(e, "reason", None) or e
        raise ZooDownloadError(f"cannot download {url} ({reason}): no network here? Copy the "
                               "model folder onto this machine and load it by its path"
                               ) from None


def _unpack(tarball: Path, into: Path, url: str) -> Path:
    """Unpacks ``tarball`` into ``into`` (members outside it refused) and returns the folder
    holding ``pipeline.config``."""
    try:
        with tarfile.open(tarball, "r:*") as archive:
            archive.extractall(into, filter="data")
    except (tarfile.TarError, EOFError, OSError) as e:
        raise ZooDownloadError(f"{url}: not a readable tarball ({type(e).__name__}: {e})"
                               ) from None
    found = sorted(into.rglob("pipeline.config"), key=lambda p: len(p.parts))
    if not found or not _is_model(found[0].parent):
        raise ZooDownloadError(f"{url}: the tarball holds no pipeline.config with a "
                               "checkpoint/ckpt-N beside it: not a TF2 zoo model")
    return found[0].parent


__all__ = ["ZOO_URL", "ZooDownloadError", "cache_root", "download_zoo_model", "zoo_url"]
