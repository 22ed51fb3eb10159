"""Commands on a workdir or output folder in a bucket (``--workdir gs://...``, ``--out
gs://...``): they work on local staging copies (``train.remote_workdir``), and what they print
names the bucket's paths, never the staging folders behind them."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from typing import IO

from jaxdet import files


class _ShownAsGiven:
    """A text stream that writes through to ``stream`` with each local staging folder in
    ``replacements`` (``{local folder: the URL it stands for}``) replaced by its URL."""

    def __init__(self, stream: IO[str], replacements: dict[str, str]):
        self._stream = stream
        self._replacements = sorted(replacements.items(), key=lambda kv: -len(kv[0]))

    def write(self, text: str) -> int:
        for local, url in self._replacements:
            text = text.replace(local, url)
        return self._stream.write(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def staged(args: argparse.Namespace) -> Iterator[None]:
    """Within the block ``args.workdir`` and ``args.out`` are local folders (staging copies of
    remote ones, sent back when the block ends) and printed paths name the remote ones."""
    import sys

    from jaxdet.train.remote_workdir import staged_output, staged_reader

    given = (args.workdir, args.out)
    with staged_reader(args.workdir) as workdir, staged_output(args.out) as out:
        replacements = {os.fspath(local): os.fspath(url).rstrip("/")
                        for local, url in ((workdir, given[0]), (out, given[1]))
                        if url is not None and files.is_url(url)}
        args.workdir, args.out = workdir, out
        try:
            if replacements:
                with (contextlib.redirect_stdout(_ShownAsGiven(sys.stdout, replacements)),
                      contextlib.redirect_stderr(_ShownAsGiven(sys.stderr, replacements))):
                    yield
            else:
                yield
        finally:
            args.workdir, args.out = given


__all__ = ["staged"]
