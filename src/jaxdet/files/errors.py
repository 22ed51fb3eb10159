"""Errors of the file layer: one line naming the path, and what to do about it.

:func:`remote_call` runs one file-system call on a URL: a missing file stays a
``FileNotFoundError`` (so callers' ``except FileNotFoundError`` keep working), a missing
client library, missing or refused credentials and a connection that stays down after the
client's own retries each become a :class:`FileAccessError` whose message is one line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

logger = logging.getLogger("jaxdet.files")

T = TypeVar("T")

# scheme -> (the fsspec implementation's package, the jaxdet extra that installs it)
BACKENDS = {"gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs"), "s3": ("s3fs", "s3")}
CREDENTIALS_HINT = {
    "gs": "run `gcloud auth application-default login`, or set "
          "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file",
    "s3": "set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or an AWS profile",
}
RETRY_PAUSE_S = 1.0  # one more try after the client's own retries, after this pause


class FileAccessError(OSError):
    """A path that could not be read or written, said in one line (the path first)."""


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def missing_backend(url: str, err: ImportError) -> FileAccessError:
    """The error for a URL whose fsspec implementation is not installed."""
    scheme = _scheme(url)
    package, extra = BACKENDS.get(scheme, (getattr(err, "name", None) or "?", None))
    how = f"pip install 'jaxdet[{extra}]'" if extra else f"pip install {package}"
    return FileAccessError(f"{url}: reading {scheme}:// paths needs the {package} package "
                           f"({how})")


def _status(err: BaseException) -> int | None:
    code = getattr(err, "code", None)
    if isinstance(code, int):
        return code
    text = str(err)
    if text.startswith("Forbidden"):
        return 403
    return None


def _is_auth_error(err: BaseException) -> bool:
    if type(err).__module__.startswith(("google.auth", "botocore.exceptions")) and (
            "Credential" in type(err).__name__ or "Auth" in type(err).__name__
            or "Token" in type(err).__name__):
        return True
    return _status(err) in (401, 403)


def _is_connection_error(err: BaseException) -> bool:
    names = {c.__name__ for c in type(err).__mro__}
    return bool(names & {"ClientError", "ClientConnectionError", "ServerDisconnectedError",
                         "TimeoutError", "ConnectionError", "ProxyError"}) or (
        _status(err) is not None and _status(err) >= 500)


def access_error(url: str, err: BaseException) -> BaseException:
    """``err`` raised by a file system on ``url`` as the error jaxdet raises (see module)."""
    if isinstance(err, FileAccessError):
        return err
    if isinstance(err, FileNotFoundError):
        return FileNotFoundError(f"{url}: not found")
    if isinstance(err, IsADirectoryError | NotADirectoryError | FileExistsError):
        return type(err)(f"{url}: {_one_line(err.strerror or err)}")
    if isinstance(err, ImportError):
        return missing_backend(url, err)
    if _is_auth_error(err):
        hint = CREDENTIALS_HINT.get(_scheme(url), "check the credentials for this store")
        return FileAccessError(f"{url}: access denied ({_one_line(err, 120)}); {hint}")
    if _is_connection_error(err):
        return FileAccessError(f"{url}: the storage service could not be reached after "
                               f"retries ({type(err).__name__}: {_one_line(err, 120)})")
    return FileAccessError(f"{url}: {type(err).__name__}: {_one_line(err)}")


def remote_call(url: str, call: Callable[[], T]) -> T:
    """``call()``, an operation of the file system of ``url``, with its errors turned into
    :func:`access_error`'s; a connection error is tried once more first."""
    for attempt in (0, 1):
        try:
            return call()
        except Exception as err:  # noqa: BLE001  (every failure becomes one line)
            if attempt == 0 and _is_connection_error(err) and not _is_auth_error(err):
                logger.warning("%s: %s; trying once more", url, _one_line(err, 120))
                time.sleep(RETRY_PAUSE_S)
                continue
            raise access_error(url, err) from None
    raise AssertionError("unreachable")
