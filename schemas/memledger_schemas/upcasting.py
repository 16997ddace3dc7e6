"""Upcasting: older stored payload versions are lifted to the current one on read, never
rewritten in the store.

An upcaster is registered for ``(event_type, from_version)`` and returns the payload of
``from_version + 1``; ``upcast`` applies them in a chain.
"""

from collections.abc import Callable, Mapping
from typing import Any

Upcaster = Callable[[Mapping[str, Any]], dict[str, Any]]

UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def upcaster(event_type: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register ``fn`` as the upcaster from ``from_version`` to ``from_version + 1``."""

    def register(fn: Upcaster) -> Upcaster:
        UPCASTERS[(event_type, from_version)] = fn
        return fn

    return register


def upcast(event_type: str, version: int, payload: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
    """Apply every registered upcaster from ``version`` on; return the final version and data."""
    data = dict(payload)
    while (step := UPCASTERS.get((event_type, version))) is not None:
        data = step(data)
        version += 1
    return version, data


@upcaster("conversation.message_appended", 1)
def upcast_message_appended_v1_v2(payload: Mapping[str, Any]) -> dict[str, Any]:
    """v2 renamed ``text`` to ``content`` and added an optional ``participant``."""
    data = {key: value for key, value in payload.items() if key != "text"}
    data["content"] = payload["text"]
    data.setdefault("participant", None)
    return data
