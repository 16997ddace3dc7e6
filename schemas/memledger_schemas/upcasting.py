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


@upcaster("space.policy_set", 1)
def upcast_policy_set_v1_v2(payload: Mapping[str, Any]) -> dict[str, Any]:
    """v2 added lifecycle fields, each defaulting to what v1 meant (no retroactivity, single-
    valued predicates, no consolidation, no forgetting by decay, no audit)."""
    return {"layer_retention_days": {}, "forget_below": None, "retroactive": False,
            "cardinality": {}, "default_cardinality": "single", "consolidation": "off",
            "merge_cosine": 0.92, "audit_retrievals": False, **payload}


@upcaster("retrieval.performed", 1)
def upcast_retrieval_v1_v2(payload: Mapping[str, Any]) -> dict[str, Any]:
    """v2 records the request (to replay it) and each result's section; a v1 retrieval was a
    search whose request is unknown (``parameters`` empty: it cannot be replayed)."""
    data = {k: v for k, v in payload.items() if k not in ("item_ids", "scores")}
    data["results"] = [{"ref": str(ref), "score": score, "section": "results"}
                       for ref, score in zip(payload["item_ids"], payload["scores"], strict=True)]
    return {"operation": "search", "subject": None, "spaces": [], "parameters": {}, **data}


@upcaster("memory.asserted", 1)
def upcast_asserted_v1_v2(payload: Mapping[str, Any]) -> dict[str, Any]:
    """v2 added ``layer``; a v1 item's layer follows from its envelope (``None``)."""
    return {"layer": None, **payload}


@upcaster("memory.superseded", 1)
def upcast_superseded_v1_v2(payload: Mapping[str, Any]) -> dict[str, Any]:
    """v2 added ``valid_until``; v1 items stopped being true when superseded (``None``)."""
    return {"valid_until": None, **payload}


@upcaster("memory.asserted", 2)
def upcast_asserted_v2_v3(payload: Mapping[str, Any]) -> dict[str, Any]:
    """v3 added ``derivation``; every earlier item was written by a client (``None``)."""
    return {"derivation": None, **payload}


@upcaster("space.policy_set", 2)
def upcast_policy_set_v2_v3(payload: Mapping[str, Any]) -> dict[str, Any]:
    """v3 added ``theme_cosine``; earlier policies formed no themes (``None``)."""
    return {"theme_cosine": None, **payload}
