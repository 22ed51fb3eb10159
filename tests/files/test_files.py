"""jaxdet.files on a real GCS API (the emulator of tests/gcs_emulator.py) and on local disk:
the same calls, the same results, errors in one line."""

from __future__ import annotations

import http.server
import sys
import threading

import pytest

from jaxdet import files
from jaxdet.files import paths as file_paths


def _plain(name: str) -> str:
    """A test's name without the brackets of its parameters (glob characters)."""
    return name.replace("[", "-").replace("]", "")


@pytest.fixture
def root(gcs, request):
    """A fresh prefix of the emulator's bucket for one test."""
    return f"gs://{gcs.bucket}/files/{_plain(request.node.name)}"


@pytest.fixture(params=["local", "gcs"])
def anywhere(request, tmp_path):
    """The same test on a local folder and on the bucket."""
    if request.param == "local":
        return str(tmp_path)
    gcs = request.getfixturevalue("gcs")
    return f"gs://{gcs.bucket}/anywhere/{_plain(request.node.name)}"


@pytest.mark.slow
def test_write_read_list_and_remove_the_same_everywhere(anywhere):
    files.makedirs(files.join(anywhere, "shards"))
    for i in range(3):
        files.write_bytes(files.join(anywhere, "shards", f"part-{i:05d}-of-00003"),
                          bytes([i]) * (1000 + i))
    files.write_text(files.join(anywhere, "notes.txt"), "héllo\n")
    assert files.read_text(files.join(anywhere, "notes.txt")) == "héllo\n"
    found = files.glob(files.join(anywhere, "shards", "part-*-of-00003"))
    assert found == [files.join(anywhere, "shards", f"part-{i:05d}-of-00003") for i in range(3)]
    assert files.listdir(anywhere) == ["notes.txt", "shards"]
    assert files.isdir(files.join(anywhere, "shards"))
    assert files.isfile(found[2]) and not files.isfile(files.join(anywhere, "shards"))
    assert files.getsize(found[2]) == 1002
    assert files.read_range(found[1], 990, 20) == bytes([1]) * 11  # short at the end
    assert files.parent(found[0]) == files.join(anywhere, "shards")
    assert files.basename(found[0]) == "part-00000-of-00003"
    files.remove(found[0])
    files.remove(found[0])  # already gone: not an error
    assert not files.exists(found[0])
    files.rmtree(files.join(anywhere, "shards"))
    assert files.glob(files.join(anywhere, "shards", "*")) == []


def test_a_remote_file_is_streamed_in_blocks_and_read_by_ranges(root, monkeypatch):
    """open_file reads a large object block by block (never all of it at once); read_range is
    one ranged request of exactly the bytes asked for."""
    url = f"{root}/big.bin"
    data = bytes(range(256)) * 8192  # 2 MiB
    files.write_bytes(url, data)
    fs, _ = file_paths.filesystem(url)
    asked: list[tuple[int, int]] = []
    real = fs.cat_file

    def spy(path, start=None, end=None, **kw):
        asked.append((start, end))
        return real(path, start=start, end=end, **kw)

    monkeypatch.setattr(fs, "cat_file", spy)
    with files.open_file(url, "rb", block_size=1 << 18) as f:
        f.seek(1_000_000)
        assert f.read(16) == data[1_000_000:1_000_016]
    assert asked == [(1_000_000, 1_000_000 + (1 << 18) + 16)]  # one block ahead, not 2 MiB
    asked.clear()
    assert files.read_range(url, 123_456, 789) == data[123_456:124_245]
    assert asked == [(123_456, 124_245)]


def test_missing_object_and_bucket_are_one_line_not_found(gcs):
    for url in (f"gs://{gcs.bucket}/no/such/object.json", "gs://no-such-bucket-here/x.json"):
        with pytest.raises(FileNotFoundError) as err:
            files.read_bytes(url)
        assert str(err.value) == f"{url}: not found"
    assert files.glob(f"gs://{gcs.bucket}/no/such/*.tfrecord") == []


def test_a_scheme_whose_package_is_missing_names_the_extra(monkeypatch):
    import fsspec  # noqa: F401 - loads fsspec.registry, the module (fsspec.registry is a mapping)

    monkeypatch.setitem(sys.modules, "s3fs", None)  # as if s3fs were not installed
    monkeypatch.delitem(sys.modules["fsspec.registry"]._registry, "s3",
                        raising=False)  # nor loaded yet by an earlier test
    file_paths._filesystem.cache_clear()
    with pytest.raises(files.FileAccessError) as err:
        files.read_bytes("s3://bucket/data/train.tfrecord")
    assert str(err.value) == ("s3://bucket/data/train.tfrecord: reading s3:// paths needs the "
                              "s3fs package (pip install 'jaxdet[s3]')")
    file_paths._filesystem.cache_clear()


def _read_through(handler, url: str, monkeypatch) -> files.FileAccessError:
    """The error ``files.read_bytes(url)`` raises when the storage endpoint is an HTTP server
    on 127.0.0.1 answering with ``handler`` (started and stopped here)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{server.server_port}")
        monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
        file_paths._filesystem.cache_clear()
        with pytest.raises(files.FileAccessError) as err:
            files.read_bytes(url)
    finally:
        server.shutdown()
        file_paths._filesystem.cache_clear()
    return err.value


class _Refuses(http.server.BaseHTTPRequestHandler):
    """A storage endpoint that refuses every request as GCS does without credentials."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        body = (b'{"error": {"code": 401, "message": "Anonymous caller does not have '
                b'storage.objects.get access to the Google Cloud Storage object."}}')
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_missing_credentials_are_one_line_with_what_to_do(monkeypatch):
    err = _read_through(_Refuses, "gs://private-bucket/coco/label_map.pbtxt", monkeypatch)
    message = str(err)
    assert "\n" not in message
    assert message.startswith("gs://private-bucket/coco/label_map.pbtxt: access denied")
    assert "gcloud auth application-default login" in message


class _Drops(http.server.BaseHTTPRequestHandler):
    """A storage endpoint whose every connection drops before an answer."""

    calls = 0

    def handle_one_request(self):
        type(self).calls += 1
        self.rfile.readline()
        self.connection.close()
        self.close_connection = True


def test_a_connection_that_keeps_dropping_is_retried_then_one_line(monkeypatch):
    import types

    import gcsfs.retry

    async def no_wait(_seconds):  # the client's back-off, without the minute of waiting
        return None

    monkeypatch.setattr(gcsfs.retry, "asyncio", types.SimpleNamespace(sleep=no_wait))
    monkeypatch.setattr("jaxdet.files.errors.RETRY_PAUSE_S", 0.0)
    err = _read_through(_Drops, "gs://bucket/train.tfrecord-00000-of-00001", monkeypatch)
    message = str(err)
    assert "\n" not in message
    assert message.startswith("gs://bucket/train.tfrecord-00000-of-00001: the storage service "
                              "could not be reached after retries (")
    assert _Drops.calls >= 2 * 6  # the client's 6 tries, twice (jaxdet's one more try)
