"""Progress of long operator commands: a bar on a terminal, a plain line now and then
otherwise (on stderr, so stdout can carry data)."""

import sys
import time
from types import TracebackType

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)

_PLAIN_EVERY_SECONDS = 5.0


class Bar:
    def __init__(self, label: str, total: int) -> None:
        self._label = label
        self._total = total
        self._last = 0.0
        self._rich: Progress | None = None
        if sys.stderr.isatty():
            self._rich = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(),
                                  TimeRemainingColumn(), transient=False)
            self._task = self._rich.add_task(label, total=total)

    def __enter__(self) -> "Bar":
        if self._rich is not None:
            self._rich.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._rich is not None:
            self._rich.stop()

    def update(self, done: int, total: int | None = None) -> None:
        total = total or self._total
        if self._rich is not None:
            self._rich.update(self._task, completed=done, total=total)
        elif time.monotonic() - self._last > _PLAIN_EVERY_SECONDS or done >= total:
            self._last = time.monotonic()
            print(f"{self._label}: {done}/{total}", file=sys.stderr, flush=True)
