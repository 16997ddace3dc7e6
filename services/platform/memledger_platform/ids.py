"""UUIDv7 ids: time-ordered, so event ids sort roughly by creation and index well."""

import random
import threading
import time
from uuid import UUID

# Random bits for ids, not secrets: seeded once from the OS, then cheap (no syscall per id).
_random = random.Random()  # noqa: S311
_lock = threading.Lock()
_last_ms = 0
_counter = 0


def uuid7() -> UUID:
    """A RFC 9562 UUIDv7; ids made in one process are strictly increasing (12-bit counter in
    ``rand_a`` within the same millisecond, borrowing the next millisecond on overflow)."""
    global _last_ms, _counter  # noqa: PLW0603  (process-wide monotonic state is the point)
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms > _last_ms:
            _last_ms, _counter = now_ms, 0
        else:
            _counter += 1
            if _counter > 0xFFF:
                _last_ms, _counter = _last_ms + 1, 0
        ms, seq = _last_ms, _counter
        rand_b = _random.getrandbits(62)
    value = (ms << 80) | (0x7 << 76) | (seq << 64) | (0b10 << 62) | rand_b
    return UUID(int=value)
