"""The one adapter from ``progress(what, done, total)`` (``patchset.progress``) to bars on a terminal.

The packages report steps and bytes through the same callback shape; how they look is decided
here: a callback made with ``unit="bytes"`` shows sizes and a transfer speed, any other shows
``done/total``. Bars are drawn (and rich imported) only when stderr is a terminal; otherwise
``callback`` returns ``None`` and nothing is imported, so a piped or CI run pays nothing for it.
What a bar describes (a patch id, a file name from an archive) is data: it is shown through
``patchset.text.terminal`` and rich's markup escape, never read as markup or terminal control.
"""

from __future__ import annotations

import sys
from typing import IO, Any

from patchset.progress import Progress
from patchset.text import terminal

BYTES = "bytes"


class Bars:
    """``with Bars() as bars: run(progress=bars.callback("apply"), download_progress=bars.callback(
    "", unit="bytes"))``. Each callback gets its own transient bar, created on its first report (a
    download that never happens shows nothing); a finished byte bar is hidden."""

    def __init__(self, stream: IO[str] | None = None, enabled: bool | None = None, console: Any = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            try:
                enabled = self.stream.isatty()
            except (AttributeError, ValueError):
                enabled = False
        self.enabled = bool(enabled or console is not None)
        self._console = console
        self.rich: Any = None  # rich.progress.Progress while drawing

    def __enter__(self) -> Bars:
        if self.enabled:
            self.rich = _rich_progress(self._console, self.stream)
            self.rich.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.rich is not None:
            self.rich.__exit__(None, None, None)

    def callback(self, label: str, unit: str = "") -> Progress | None:
        """A ``progress(what, done, total)`` that draws one bar described as ``label what``;
        ``None`` when no bar is drawn."""
        if not self.enabled:
            return None
        task: list[Any] = []  # the rich task id, made on the first report
        last = [""]
        from rich.markup import escape

        def progress(what: str, done: int, total: int | None) -> None:
            bar = self.rich
            if bar is None:
                return
            # a file name or a patch id is data: shown, never read as rich markup or terminal control
            description = escape(terminal(f"{label} {what}".strip()[:70]))
            if not task:
                task.append(bar.add_task(description, total=total, unit=unit))
            elif unit == BYTES and what != last[0]:  # the next file: its own size, speed and clock
                bar.reset(task[0], total=total, description=description, visible=True)
            last[0] = what
            bar.update(task[0], completed=done, total=total, description=description)
            if unit == BYTES and total is not None and done >= total:
                bar.update(task[0], visible=False)  # a finished download leaves the screen

        return progress


def _rich_progress(console: Any, stream: IO[str]) -> Any:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        ProgressColumn,
        Task,
        TextColumn,
        TimeElapsedColumn,
        TransferSpeedColumn,
    )
    from rich.text import Text

    class Amount(ProgressColumn):
        """Sizes for a byte bar, ``done/total`` for a step bar."""

        def __init__(self) -> None:
            super().__init__()
            self._bytes = DownloadColumn()

        def render(self, task: Task) -> Text:
            if task.fields.get("unit") == BYTES:
                return self._bytes.render(task)
            total = "?" if task.total is None else str(int(task.total))
            return Text(f"{int(task.completed)}/{total}", style="progress.download")

    class Speed(ProgressColumn):
        """A transfer speed for a byte bar, nothing for a step bar."""

        def __init__(self) -> None:
            super().__init__()
            self._speed = TransferSpeedColumn()

        def render(self, task: Task) -> Text:
            return self._speed.render(task) if task.fields.get("unit") == BYTES else Text("")

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        Amount(),
        Speed(),
        TimeElapsedColumn(),
        console=console or Console(file=stream, highlight=False),
        transient=True,
    )
