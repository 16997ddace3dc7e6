"""JSON request bodies as memledger reads them: labelled as JSON (or not labelled), and with no
key twice in one object. Parsers disagree on which of two values for one key wins, so a proxy
or a client library and memledger could read two different requests in the same bytes.

Shared by every boundary that takes a JSON document: the HTTP APIs, gRPC's ``json_body`` and
NATS intake.
"""

import re
from dataclasses import dataclass, field
from typing import Any

import orjson

_STRING = rb'"[^"\\]*(?:\\.[^"\\]*)*"'
_STRINGS = re.compile(_STRING + rb"(\s*:)?")
"""Every string, in order, each with the colon that makes it a key (outside strings JSON has
no quotes, so matching from the start never begins inside one)."""
_TOKENS = re.compile(rb"(" + _STRING + rb")(\s*:)?|[{}\[\],]")


def is_json(content_type: str | None) -> bool:
    """Whether a body with this ``Content-Type`` is taken as JSON: none given (the usual
    default), ``application/json`` or an ``application/...+json`` type, any parameters."""
    if content_type is None:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/")
                                           and media.endswith("+json"))


def repeated_key(raw: bytes, parsed: Any) -> str | None:
    """The dotted path (``commands.3.kind``) of the first key that an object of the JSON
    document ``raw`` holds twice, else ``None``. ``parsed``: ``raw`` as ``orjson.loads`` read
    it (keeping the last of repeated keys, so it has fewer keys than ``raw`` exactly when one
    is repeated: counted cheaply, the path looked for only then)."""
    if _key_count(raw) == _keys_in(parsed):
        return None
    return _first_repeat(raw)


def _key_count(document: bytes) -> int:
    found = _STRINGS.findall(document)
    return len(found) - found.count(b"")


_SCALARS = frozenset((int, float, bool, str, type(None)))


def _keys_in(parsed: Any) -> int:
    """How many keys the objects of a parsed document hold. Iterative, so any depth the
    parser accepted; a list of scalars (an embedding) is told by its types' set, made in C,
    rather than written out again as JSON to be counted."""
    count, pending = 0, [parsed]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            count += len(value)
            pending.extend(v for v in value.values() if isinstance(v, dict | list))
        elif isinstance(value, list) and not _SCALARS.issuperset(map(type, value)):
            pending.extend(v for v in value if isinstance(v, dict | list))
    return count


@dataclass
class _Level:
    """One open object (its keys so far) or array (its position) of the document."""

    is_object: bool
    keys: set[str] = field(default_factory=set)
    at: str | int = 0


def _first_repeat(raw: bytes) -> str | None:
    """Iterative, so any depth the parser accepted."""
    levels: list[_Level] = []
    for match in _TOKENS.finditer(raw):
        string, colon = match.group(1), match.group(2)
        if colon is not None:
            level, key = levels[-1], _text(string)
            if key in level.keys:
                return ".".join([*(str(outer.at) for outer in levels[:-1]), key])
            level.keys.add(key)
            level.at = key
        elif string is None:
            _structure(levels, match.group())
    return None


def _structure(levels: list[_Level], token: bytes) -> None:
    if token in (b"{", b"["):
        levels.append(_Level(token == b"{"))
    elif token == b",":
        if not levels[-1].is_object:
            levels[-1].at = int(levels[-1].at) + 1
    else:
        levels.pop()


def _text(string: bytes) -> str:
    # Escapes decoded, so "a\u0062" and "ab" are the same key.
    decoded: str = orjson.loads(string) if b"\\" in string else string[1:-1].decode()
    return decoded
