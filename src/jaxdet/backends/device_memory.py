"""How much memory a device has free for a new allocation, and whether devices share the
host's: on a GPU or TPU the allocator's limit less what is in use, per device; on a CPU what
the operating system reports available (free swap included), which all of the host's CPU
devices share."""

from __future__ import annotations

from pathlib import Path

import jax


def shares_host_memory(device: jax.Device) -> bool:
    """Whether ``device``'s memory is the host's (CPU devices: all of a host's share it)."""
    return device.platform == "cpu"


def host_available_bytes() -> int | None:
    """MemAvailable plus SwapFree from /proc/meminfo, in bytes; None where there is none."""
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    fields = {}
    for row in text.splitlines():
        name, _, rest = row.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name] = int(parts[0]) * 1024
    if "MemAvailable" not in fields:
        return None
    return fields["MemAvailable"] + fields.get("SwapFree", 0)


def free_bytes(device: jax.Device) -> int | None:
    """Bytes free for a new allocation on ``device`` (module docstring); None when the
    platform does not say."""
    if shares_host_memory(device):
        return host_available_bytes()
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - a backend without statistics
        return None
    if not stats or "bytes_limit" not in stats:
        return None
    return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))


__all__ = ["free_bytes", "host_available_bytes", "shares_host_memory"]
