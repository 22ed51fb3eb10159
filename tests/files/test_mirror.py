"""jaxdet.files.mirror on the GCS emulator: a staging folder kept in step with a bucket
folder (what a remote workdir runs on)."""

from __future__ import annotations

from jaxdet import files
from jaxdet.files import paths as file_paths
from jaxdet.files.mirror import Mirror


def test_pull_push_sync_and_order(gcs, tmp_path, monkeypatch):
    url = f"gs://{gcs.bucket}/mirror/run"
    files.write_text(f"{url}/config.yaml", "a: 1\n")
    files.write_text(f"{url}/checkpoints/4/state", "four")
    files.write_text(f"{url}/checkpoints/4/seal", "ok")
    files.write_text(f"{url}/checkpoints/8/state", "eight, its upload cut off")
    local = tmp_path / "staging"
    (local / "checkpoints" / "12").mkdir(parents=True)  # stale: not in the bucket
    (local / "checkpoints" / "12" / "state").write_text("old")
    (local / "lock").write_text("local only")

    mirror = Mirror(url, local, skip=lambda rel: rel == "lock")
    sealed = lambda rel, remote: (not rel.startswith("checkpoints/")  # noqa: E731
                                  or f"{'/'.join(rel.split('/')[:2])}/seal" in remote)
    assert mirror.pull(wanted=sealed) == 3
    held = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    assert held == ["checkpoints/4/seal", "checkpoints/4/state", "config.yaml", "lock"]
    assert not (local / "checkpoints" / "12").exists()  # stale step gone, folder included
    assert mirror.push() == 0  # nothing changed since the pull

    order: list[str] = []
    fs, _ = file_paths.filesystem(url)
    real = fs.open
    monkeypatch.setattr(fs, "open", lambda path, mode="rb", **kw: (
        order.append(path.rsplit("/run/", 1)[1]) if "w" in mode else None) or real(
        path, mode, **kw))
    (local / "checkpoints" / "16").mkdir()
    (local / "checkpoints" / "16" / "state").write_text("sixteen")
    (local / "checkpoints" / "16" / "seal").write_text("ok")
    (local / "metrics.jsonl").write_text("{}\n")
    for name in ("seal", "state"):
        (local / "checkpoints" / "4" / name).unlink()  # rotated out by the run
    assert mirror.push(sync=["checkpoints"], last=lambda rel: rel.endswith("/seal")) == 3
    assert order == ["checkpoints/16/state", "metrics.jsonl", "checkpoints/16/seal"]
    # 4 rotated out, and 8 (an upload cut off, never pulled) cleared: the synced folder
    # holds what the staging folder holds
    assert sorted(mirror.remote_files()) == [
        "checkpoints/16/seal", "checkpoints/16/state", "config.yaml", "metrics.jsonl"]
    assert mirror.pull() == 0  # what it sent is not fetched back


def test_an_object_replaced_in_the_bucket_is_fetched_again_even_at_the_same_size(gcs, tmp_path):
    """A workdir deleted and written again by another run (same steps, same file sizes):
    the staging folder takes the new contents, not the stale ones of the same size."""
    url = f"gs://{gcs.bucket}/mirror/replaced"
    files.write_text(f"{url}/checkpoints/1/metadata", "run A")
    mirror = Mirror(url, tmp_path / "staging")
    assert mirror.pull() == 1 and mirror.pull() == 0
    files.write_text(f"{url}/checkpoints/1/metadata", "run B")
    assert mirror.pull() == 1
    assert (tmp_path / "staging" / "checkpoints" / "1" / "metadata").read_text() == "run B"
    again = Mirror(url, tmp_path / "staging")  # a later process on the same staging folder
    assert again.pull() == 0
