"""One example in every n of a data source: the TF OD API's ``sample_1_of_n_examples``.

TF's input reader keeps records 0, n, 2n, ... of its stream (``Dataset.shard(n, 0)``); a
jaxdet source is indexed, so :class:`EveryNth` keeps the source's items 0, n, 2n, ... in its
order (TFRecord files in the order given, records in file order; COCO JSON in image order).

    source = every_nth(CocoSource(...), 5)   # items 0, 5, 10, ... of the file
"""

from __future__ import annotations

from typing import Any


class EveryNth:
    """The items ``0, n, 2n, ...`` of ``source``: ``len``, indexing, ``image_ids`` and
    ``ground_truth()`` (the COCO dict restricted to the kept images) are those of the kept
    items; every other attribute (classes, keypoint layout, ``describe``) is the source's."""

    def __init__(self, source: Any, n: int):
        if n < 1:
            raise ValueError(f"sample 1 of n examples: n must be >= 1, got {n}")
        self._source = source
        self.n = int(n)
        self._indices = range(0, len(source), self.n)

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, index: int):
        return self._source[self._indices[index]]

    @property
    def image_ids(self) -> list[int]:
        return [int(self._source[i]["image_id"]) for i in self._indices]

    def ground_truth(self) -> dict[str, Any]:
        """The source's COCO ground truth with only the kept images and their annotations."""
        full = self._source.ground_truth()
        kept = {int(i) for i in self.image_ids}
        out = dict(full)
        out["images"] = [im for im in full["images"] if int(im["id"]) in kept]
        out["annotations"] = [a for a in full.get("annotations") or []
                              if int(a["image_id"]) in kept]
        return out

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_source":  # pickling looks these up first
            raise AttributeError(name)
        return getattr(self._source, name)

    def __repr__(self) -> str:
        return f"{self._source!r}, 1 of every {self.n} ({len(self)} kept)"


def every_nth(source: Any, n: int) -> Any:
    """``source`` itself when ``n`` is 1, else :class:`EveryNth` of it."""
    return source if n == 1 else EveryNth(source, n)


__all__ = ["EveryNth", "every_nth"]
