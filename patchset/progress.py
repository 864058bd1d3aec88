"""The one progress callback shape of patchset: ``progress(what, done, total)``.

``what`` says what just happened or is under way (a patch id, a stage), ``done`` counts finished
steps and ``total`` is the number of steps, or ``None`` when it is not known. Apply, rebase,
verify, the gate and bisect all report through this shape, so the CLI drives one bar with one
adapter (``patchset.cli``) and a library user writes one function.
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def __call__(self, what: str, done: int, total: int | None) -> None: ...
