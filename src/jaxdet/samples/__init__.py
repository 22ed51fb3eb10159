"""Photos that ship with jaxdet, for the notebooks and quick tries (see ``NOTICE.md`` here
for where they come from and their licence):

* ``ducky``: ``train/robertducky1..5.jpg`` with ``boxes.json`` (normalized ``[ymin, xmin,
  ymax, xmax]`` per photo, class "rubber ducky"), and 13 held-out frames in ``test/``;
* ``photos``: ``dogs.jpg``, a photo for trying a COCO detector.

    folder = jaxdet.sample_data("ducky")
"""

from __future__ import annotations

from pathlib import Path

NAMES = ("ducky", "photos")


def sample_data(name: str) -> Path:
    """The folder of the sample data set ``name`` (one of :data:`NAMES`), inside the
    installed package.

    Returns:
      The folder, inside the installed package (read it, do not write into it).
    Raises:
      ValueError: an unknown name (the message lists the known ones).

    Example::

        ducky = jaxdet.sample_data("ducky")
        photos = sorted((ducky / "train").glob("*.jpg"))
    """
    if name not in NAMES:
        raise ValueError(f"no sample data named {name!r}; there are: {', '.join(NAMES)}")
    return Path(__file__).parent / name


__all__ = ["NAMES", "sample_data"]
