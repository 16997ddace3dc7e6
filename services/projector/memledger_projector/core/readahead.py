"""Reading the log ahead of a fold: a thread fetches the next batch while the caller folds
this one (the store's query and the transfer then cost the fold no time)."""

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from queue import Full, Queue

from memledger_platform.logshare import Record

PAGE = 5_000
"""Events per read of the log."""

Pages = Callable[[int], list[Record]]
"""The page of the log after a position (in position order; empty: nothing is left)."""


class ReadFailed(Exception):
    """Reading the store failed: ``error`` is the store's own error."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(repr(error))
        self.error = error


@contextmanager
def read_ahead(pages: Pages) -> Iterator[Iterator[list[Record]]]:
    """The log, page after page, read by a thread a page ahead of the caller (the store works
    on the next page while the caller folds this one). A failed read raises ``ReadFailed``."""
    queue: Queue[list[Record] | BaseException | None] = Queue(maxsize=2)
    stop = threading.Event()

    def put(item: list[Record] | BaseException | None) -> None:
        while not stop.is_set():
            try:
                queue.put(item, timeout=0.1)
                return
            except Full:
                continue

    def read() -> None:
        after = 0
        try:
            while not stop.is_set() and (batch := pages(after)):
                put(batch)
                after = batch[-1][0]
        except BaseException as error:  # handed to the caller, who raises it
            put(error)
        put(None)

    def batches() -> Iterator[list[Record]]:
        while (item := queue.get()) is not None:
            if isinstance(item, BaseException):
                raise ReadFailed(item)
            yield item

    reader = threading.Thread(target=read, name="rebuild-read-ahead", daemon=True)
    reader.start()
    try:
        yield batches()
    finally:
        stop.set()
        reader.join()
