"""Crypto-shredding: personal data in event payloads is sealed with a key of its data subject
before it is stored or published; destroying the key erases it everywhere the log went.

- ``PERSONAL`` names the payload fields that carry personal data, per event type, with the
  placeholder a reader sees once the key is gone.
- A sealed field is the string ``ml-enc:v1:<key_id>:<base64url(nonce | AES-GCM ciphertext)>``
  of the field's JSON value, bound (associated data) to the event id and the field name, so a
  sealed value cannot be moved to another event or field. A list of floats that single
  precision holds exactly (an embedding from a float32 model) is sealed as its packed
  little-endian float32 values behind a zero byte (``VECTOR_MARK``), which no JSON text
  begins with: a fifth of the JSON's size, and it opens to the same list.
- A field that several subjects' data reached (an audited query that showed memories of
  several) is sealed with a key derived from all of theirs (``combined``), named
  ``<key_id>+<key_id>...``: it opens only while every one of them exists.
- Idempotency keys are stored as a keyed digest (``Keyring.digest``), never as sent.
- Subject keys live in a ``Keyring``; each is wrapped (AES-GCM) by the master key from the
  settings. Erasure destroys a subject's keys: every event sealed with them opens to its
  placeholders from then on, in every replay and rebuild, and never fails.
"""

import base64
import binascii
import hashlib
import hmac
import os
import re
import sys
from abc import ABC, abstractmethod
from array import array
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from memledger_schemas.event_types import EventType

PREFIX = "ml-enc:v1:"
VECTOR_MARK = b"\x00f32"
"""What a sealed field's plaintext begins with when it holds packed float32 values."""
ERASED = "[erased]"
DIGEST_PREFIX = "ml-hash:v1:"
COMBINED = "+"
"""Joins the key ids of a combined key."""

_REASON = {"reason": ERASED}
PERSONAL: dict[str, dict[str, Any]] = {
    EventType.SESSION_STARTED: {"title": ERASED},
    EventType.SESSION_ENDED: _REASON,
    EventType.MEMORY_ASSERTED: {"content": ERASED, "triple": None, "tags": []},
    EventType.MEMORY_REVISED: {"content": ERASED, "triple": None, "tags": [], "reason": ERASED},
    EventType.MEMORY_SUPERSEDED: _REASON,
    EventType.MEMORY_RETRACTED: _REASON,
    EventType.MEMORY_REAFFIRMED: _REASON,
    EventType.MEMORY_ARCHIVED: _REASON,
    EventType.MEMORY_PROMOTED: _REASON,
    EventType.MEMORY_MERGED: _REASON,
    EventType.MESSAGE_APPENDED: {"content": ERASED, "text": ERASED, "participant": None},
    EventType.PREFERENCE_EXTRACTED: {"value": ERASED},
    EventType.MEMORY_EMBEDDED: {"vector": None},
    EventType.MESSAGE_EMBEDDED: {"vector": None},
    EventType.ENTITIES_EXTRACTED: {"entities": []},
    EventType.ENTITY_UPSERTED: {"name": ERASED, "aliases": []},
    EventType.RELATION_RETRACTED: _REASON,
    EventType.FEEDBACK_RECORDED: {"comment": None},
    EventType.RETRIEVAL_PERFORMED: {"query": ERASED, "subject": ERASED, "parameters": {}},
    EventType.THEME_FORMED: {"label": ERASED},
    EventType.THEME_UPDATED: {"label": ERASED},
}
"""Event type → personal field → what a reader sees once the subject is erased: every field
a client writes free text into about a subject's memories, messages, sessions, entities and
relations, what an audited call asked, and a theme's label (its members' words). (Ids,
kinds, types, categories, rule ids, source refs, space and agent names and descriptions,
space archive reasons and learned importances' reasons are not sealed: they must not hold
personal data.)"""


@dataclass(frozen=True)
class SubjectKey:
    key_id: str
    key: bytes


class SourceErased(Exception):
    """A key was asked for to seal what was learned from text whose key is destroyed."""


class Keyring(ABC):
    @abstractmethod
    def for_writing(self, tenant: str, subject: str, space: str, source: str | None = None
                    ) -> SubjectKey:
        """The subject's live key (made on first use), noting that it seals data in ``space``
        (so an erasure can check that space's legal hold). With ``source`` (the key that
        sealed what the data was learned from), no key is made unless that key is live, at
        the moment of making it (``SourceErased``): an erasure landing after the writer's
        check must not see what was learned from the erased text come back under a new key."""

    def existing_for_writing(self, wanted: Collection[tuple[str, str, str]]
                             ) -> dict[tuple[str, str, str], SubjectKey]:
        """Of ``wanted`` (tenant, subject, space), those whose subject has a live key that
        already seals data in that space, with it: what ``for_writing`` would return, for many
        at once and without making or changing any key (the rest: ``for_writing``)."""
        return {}

    @abstractmethod
    def key(self, key_id: str) -> bytes | None:
        """A key by id; ``None`` once destroyed (or if unknown)."""

    @abstractmethod
    def live(self, key_ids: Collection[str]) -> set[str]:
        """Those of ``key_ids`` that exist and are not destroyed, asked of the store itself
        (never a cache: another process may have just erased their subject)."""

    @abstractmethod
    def spaces_of(self, tenant: str, subject: str) -> list[str]:
        """Every space the subject's live keys have sealed data in."""

    @abstractmethod
    def destroy(self, tenant: str, subject: str) -> list[str]:
        """Destroy the subject's live keys; their ids (empty if it had none)."""

    def forget(self, key_ids: list[str]) -> None:  # noqa: B027  (only caching keyrings)
        """Drop cached copies of destroyed keys (readers call it on ``subject.erased``)."""

    @abstractmethod
    def digest(self, tenant: str, text: str) -> str:
        """A keyed digest of ``text`` (an idempotency key) under a secret of the keyring's:
        equal for equal (tenant, text), and revealing nothing of it without that secret."""

    def compact(self) -> list[str]:
        """Remove what destroying keys left in storage below its API (old row versions
        holding the wrapped keys); the names of the tables compacted."""
        return []


def keyed_digest(secret: bytes, tenant: str, text: str) -> str:
    mac = hmac.new(secret, tenant.encode() + b"\x00" + text.encode(), hashlib.sha256)
    return DIGEST_PREFIX + mac.hexdigest()


def digest_secret(master: bytes) -> bytes:
    """The secret of ``Keyring.digest``, derived from the master key (so a digest cannot be
    confirmed by guessing without the master key, and the master key itself is never used
    for two purposes)."""
    return hmac.new(master, b"memledger idempotency key digests", hashlib.sha256).digest()


def combined(keys: Sequence[SubjectKey]) -> SubjectKey:
    """One key for data that several subjects' data reached: derived (HKDF-SHA256) from all
    of ``keys``, named by all their ids, so it can be derived again only while every one of
    them exists (erasing any one subject erases what it seals). One key: that key itself."""
    if len(keys) == 1:  # the usual event, one subject's: nothing to sort or derive
        return keys[0]
    unique = sorted({k.key_id: k for k in keys}.values(), key=lambda k: k.key_id)
    if len(unique) == 1:
        return unique[0]
    key_id = COMBINED.join(k.key_id for k in unique)
    return SubjectKey(key_id, _derive(key_id, [k.key for k in unique]))


def _derive(key_id: str, keys: Sequence[bytes]) -> bytes:
    return HKDF(algorithm=SHA256(), length=32, salt=None,
                info=b"memledger combined key " + key_id.encode()).derive(b"".join(keys))


def key_of_id(key_id: str, key_of: Callable[[str], bytes | None]) -> bytes | None:
    """The key named ``key_id``, a combined one derived again (``None`` if any part is gone)."""
    if COMBINED not in key_id:
        return key_of(key_id)
    parts = [key_of(k) for k in key_id.split(COMBINED)]
    if any(part is None for part in parts):
        return None
    return _derive(key_id, [p for p in parts if p is not None])


def new_key() -> bytes:
    return AESGCM.generate_key(bit_length=256)


def wrap(master: bytes, key_id: str, key: bytes) -> bytes:
    nonce = os.urandom(12)
    return nonce + AESGCM(master).encrypt(nonce, key, key_id.encode())


def unwrap(master: bytes, key_id: str, wrapped: bytes) -> bytes:
    return AESGCM(master).decrypt(wrapped[:12], wrapped[12:], key_id.encode())


class CipherMemo:
    """AES-GCM ciphers by their key, each made once for the events that follow: making one
    costs about twice opening an embedding's vector. The key itself is still looked up for
    every field, so a destroyed key opens nothing whatever is kept here; the memo is emptied
    when its owner sees an erasure (``Opener``) or ends a commit group (the writer), and once
    it holds ``size`` ciphers."""

    def __init__(self, size: int = 256) -> None:
        self._made: dict[bytes, AESGCM] = {}
        self._size = size

    def __call__(self, key: bytes) -> AESGCM:
        found = self._made.get(key)
        if found is None:
            if len(self._made) >= self._size:
                self._made.clear()
            found = self._made[key] = AESGCM(key)
        return found

    def clear(self) -> None:
        self._made.clear()


Making = Callable[[bytes], AESGCM]
"""What makes the cipher of a key: ``AESGCM`` itself, or a ``CipherMemo``."""


def seal_payload(payload: dict[str, Any], event_type: str, event_id: str, key: SubjectKey,
                 made: Making = AESGCM) -> dict[str, Any]:
    """``payload`` with its personal fields sealed (fields that are absent, null or empty stay
    so: they hold nothing, and open to what their placeholder is anyway). ``made``: where its
    key's cipher comes from."""
    fields = PERSONAL.get(event_type, {})
    sealed = dict(payload)
    aead = made(key.key)
    for name in fields:
        value = payload.get(name)
        if value is None or value in ([], {}):
            continue
        nonce = os.urandom(12)
        box = aead.encrypt(nonce, _plain(value), f"{event_id}/{name}".encode())
        sealed[name] = PREFIX + key.key_id + ":" + base64.urlsafe_b64encode(
            nonce + box).decode().rstrip("=")
    return sealed


_FLOATS = frozenset((float,))


def _plain(value: Any) -> bytes:
    """What a field's value is sealed as: packed float32 values for a list of floats single
    precision holds exactly (the usual embedding), its JSON otherwise."""
    if (isinstance(value, list | tuple) and value and _single(value[0])
            and _FLOATS.issuperset(map(type, value))):
        packed = array("f", value)
        if packed.tolist() == list(value):
            if sys.byteorder == "big":
                packed.byteswap()
            return VECTOR_MARK + packed.tobytes()
    return orjson.dumps(value)


def _single(first: Any) -> bool:
    """Whether single precision holds ``first`` exactly: a vector whose first value it does
    not is told at once, without packing it all (a client's rounded decimals)."""
    return isinstance(first, float) and array("f", (first,))[0] == first


def _value(plain: bytes) -> Any:
    """A sealed field's value from its plaintext (``_plain``'s inverse)."""
    if not plain.startswith(VECTOR_MARK):
        return orjson.loads(plain)
    packed = array("f")
    packed.frombytes(plain[len(VECTOR_MARK):])
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tolist()


def is_sealed(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")
"""``base64.urlsafe_b64decode``'s alphabet, for ``binascii`` (a third of its time)."""


Ciphers = dict[str, AESGCM | None]
"""AES-GCM ciphers by key id (``None``: the key is gone), each made once for a run of
documents (a rebuild's fold): making one cost as much as the decryption itself. Such a
cache holds its keys as long as it lives: only for a run, and cleared of erased keys
(``Opener.for_run``)."""


def open_document(document: dict[str, Any], key_of: Callable[[str], bytes | None],
                  ciphers: Ciphers | None = None, made: Making = AESGCM) -> dict[str, Any]:
    """The event document with its sealed fields opened, or replaced by their placeholders
    when the key is gone. Unsealed documents are returned as they are. ``ciphers``: where
    the ciphers of this run are kept by key id (none: each field looks its key up and has its
    cipher from ``made``)."""
    payload = document.get("payload")
    fields = PERSONAL.get(document.get("event_type", ""))
    if fields is None or not isinstance(payload, dict):
        return document
    # One pass, copying the payload only once a sealed field turns up: a rebuild opens every
    # event of the log (this took a quarter less time than a check, then a second pass).
    opened: dict[str, Any] | None = None
    for name, placeholder in fields.items():
        value = payload.get(name)
        if isinstance(value, str) and value.startswith(PREFIX):
            if opened is None:
                opened = dict(payload)
            opened[name] = _open(value, f"{document['event_id']}/{name}", key_of, placeholder,
                                 ciphers, made)
    return document if opened is None else {**document, "payload": opened}


def _open(value: str, aad: str, key_of: Callable[[str], bytes | None], placeholder: Any,
          ciphers: Ciphers | None, made: Making) -> Any:
    key_id, _, box = value[len(PREFIX):].partition(":")
    if ciphers is None:
        key = key_of_id(key_id, key_of)
        cipher = None if key is None else made(key)
    elif (cipher := ciphers.get(key_id)) is None and key_id not in ciphers:
        key = key_of_id(key_id, key_of)
        cipher = ciphers[key_id] = None if key is None else AESGCM(key)
    if cipher is None:
        return placeholder
    raw = binascii.a2b_base64(box.encode().translate(_FROM_URLSAFE) + b"=" * (-len(box) % 4))
    return _value(cipher.decrypt(raw[:12], raw[12:], aad.encode()))


_SEALED_KEY_ID = re.compile(rb'"' + re.escape(PREFIX.encode()) + rb'([^:"]+):')


def sealed_key_ids(data: bytes) -> set[str]:
    """The ids of the keys that sealed fields of a stored event document (its JSON bytes)
    were sealed with (each part of a combined key), found without parsing it."""
    return {k for m in _SEALED_KEY_ID.findall(data) for k in m.decode().split(COMBINED)}


class MemoryKeyring(Keyring):
    """Keys in a dict: for unit tests and the fake event store."""

    def __init__(self) -> None:
        self._live: dict[tuple[str, str], SubjectKey] = {}
        self._keys: dict[str, bytes] = {}
        self._spaces: dict[tuple[str, str], set[str]] = {}
        self._secret = os.urandom(32)

    def for_writing(self, tenant: str, subject: str, space: str, source: str | None = None
                    ) -> SubjectKey:
        found = self._live.get((tenant, subject))
        if found is None:
            if source is not None and source not in self._keys:
                raise SourceErased(source)
            found = SubjectKey(os.urandom(8).hex(), new_key())
            self._live[(tenant, subject)] = found
            self._keys[found.key_id] = found.key
        self._spaces.setdefault((tenant, subject), set()).add(space)
        return found

    def existing_for_writing(self, wanted: Collection[tuple[str, str, str]]
                             ) -> dict[tuple[str, str, str], SubjectKey]:
        return {(t, s, space): found for t, s, space in wanted
                if (found := self._live.get((t, s))) is not None
                and space in self._spaces.get((t, s), ())}

    def key(self, key_id: str) -> bytes | None:
        return self._keys.get(key_id)

    def live(self, key_ids: Collection[str]) -> set[str]:
        return {k for k in key_ids if k in self._keys}

    def spaces_of(self, tenant: str, subject: str) -> list[str]:
        return sorted(self._spaces.get((tenant, subject), ()))

    def destroy(self, tenant: str, subject: str) -> list[str]:
        found = self._live.pop((tenant, subject), None)
        self._spaces.pop((tenant, subject), None)
        if found is None:
            return []
        self._keys.pop(found.key_id, None)
        return [found.key_id]

    def digest(self, tenant: str, text: str) -> str:
        return keyed_digest(self._secret, tenant, text)


class Opener:
    """What every reader of events runs them through: sealed fields opened (or placeholders),
    and on ``subject.erased`` the erased keys dropped from the keyring's cache, so nothing
    read after the erasure opens with them. Without a keyring, documents pass unchanged and
    sealed fields open to their placeholders."""

    def __init__(self, keyring: Keyring | None, ciphers: Ciphers | None = None) -> None:
        self._keyring = keyring
        self._ciphers = ciphers
        self._made = CipherMemo()

    def for_run(self) -> "Opener":
        """An opener with the same keyring for one run of many events (a rebuild), which
        makes each key's cipher once: drop it once the run is done. It forgets a key's cipher
        as it forgets the key, on the ``subject.erased`` it opens."""
        return Opener(self._keyring, {})

    def __call__(self, document: dict[str, Any]) -> dict[str, Any]:
        if document.get("event_type") == EventType.SUBJECT_ERASED and self._keyring is not None:
            erased = str(document["payload"].get("key_id", "")).split(",")
            self._keyring.forget(erased)
            self._made.clear()
            if self._ciphers:  # a combined key's id names each of its parts
                for key_id in [k for k in self._ciphers if set(k.split(COMBINED)) & set(erased)]:
                    del self._ciphers[key_id]
        return open_document(document, self._keyring.key if self._keyring else _no_key,
                             self._ciphers, self._made)

    def keys(self, key_ids: Collection[str]) -> dict[str, bytes | None]:
        """The keys with these ids as this opener would use them now (``None``: destroyed,
        or no keyring), for another process to open the same events with."""
        return {k: self._keyring.key(k) if self._keyring else None for k in key_ids}


def _no_key(_: str) -> bytes | None:
    return None
