"""Scratch files that hold the lifecycle fold's bulky values (unit vectors, content words) on
disk instead of in the process's memory: only a pass that needs them reads them back, a block
at a time, through the page cache (which the kernel gives back under pressure).

A scratch file is unlinked at creation and so goes with the process; the fold is rebuilt from
the log at every start, so nothing here outlives it. An erased value is overwritten with zeros
at once, so the opened data of an erased subject does not stay on disk until the restart.
"""

import os
import tempfile
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from memledger_platform.vectorindex.port import Vector

_BLOCK = 1024
"""Records per read when scanning: about 1.5 MB at 384 dimensions."""


class _Records:
    """Fixed-size float32 records of one width, appended and read back by number."""

    def __init__(self, dims: int, directory: str | None) -> None:
        self.dims = dims
        self.count = 0
        self._size = dims * 4
        # It lives as long as the spill (closed by close()), not one block.
        self._file = tempfile.TemporaryFile(  # noqa: SIM115
            dir=directory, prefix="memledger-lifecycle-")

    def append(self, vector: Vector) -> int:
        os.pwrite(self._file.fileno(), vector.astype("<f4").tobytes(), self.count * self._size)
        self.count += 1
        return self.count - 1

    def read(self, first: int, count: int) -> npt.NDArray[np.float32]:
        data = os.pread(self._file.fileno(), count * self._size, first * self._size)
        return np.frombuffer(data, dtype="<f4").astype(np.float32).reshape(count, self.dims)

    def zero(self, record: int) -> None:
        os.pwrite(self._file.fileno(), bytes(self._size), record * self._size)

    def close(self) -> None:
        self._file.close()


class VectorSpill:
    """Unit vectors on disk, each named by a handle (``dims``, ``record``)."""

    def __init__(self, directory: str | None = None) -> None:
        self._directory = directory
        self._files: dict[int, _Records] = {}

    def put(self, vector: Vector) -> tuple[int, int]:
        dims = int(vector.shape[0])
        records = self._files.get(dims)
        if records is None:
            records = self._files[dims] = _Records(dims, self._directory)
        return dims, records.append(vector)

    def get(self, dims: int, record: int) -> Vector:
        row: Vector = self._files[dims].read(record, 1)[0]
        return row

    def erase(self, dims: int, record: int) -> None:
        self._files[dims].zero(record)

    def scan(self, dims: int, records: npt.NDArray[np.int64]
             ) -> Iterator[tuple[npt.NDArray[np.intp], Vector]]:
        """The vectors of ``records`` (ascending), a block at a time: each block's indices
        into ``records`` and their vectors, one row each. Blocks holding none are not read."""
        files = self._files.get(dims)
        if files is None or not len(records):
            return
        blocks = records // _BLOCK
        starts = np.flatnonzero(np.r_[True, blocks[1:] != blocks[:-1]])
        for begin, end in zip(starts, [*starts[1:], len(records)], strict=True):
            first = int(blocks[begin]) * _BLOCK
            block = files.read(first, min(_BLOCK, files.count - first))
            yield np.arange(begin, end), block[records[begin:end] - first]

    def close(self) -> None:
        for records in self._files.values():
            records.close()


class WordSpill:
    """Short texts (an item's content words) on disk, each named by (offset, length)."""

    def __init__(self, directory: str | None = None) -> None:
        # It lives as long as the spill (closed by close()), not one block.
        self._file = tempfile.TemporaryFile(  # noqa: SIM115
            dir=directory, prefix="memledger-lifecycle-")
        self._end = 0

    def put(self, text: str) -> tuple[int, int]:
        data = text.encode()
        os.pwrite(self._file.fileno(), data, self._end)
        self._end += len(data)
        return self._end - len(data), len(data)

    def get(self, offset: int, length: int) -> str:
        return os.pread(self._file.fileno(), length, offset).decode() if length else ""

    def erase(self, offset: int, length: int) -> None:
        if length:
            os.pwrite(self._file.fileno(), bytes(length), offset)

    def close(self) -> None:
        self._file.close()
