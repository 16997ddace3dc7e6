"""Crypto-shredding: personal fields leave the writer sealed with their subject's key, open
with it, and open to placeholders (never an error) once it is destroyed."""

import random
from array import array
from typing import Any

import orjson
import pytest
from cryptography.exceptions import InvalidTag

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform.crypto import (
    ERASED,
    PERSONAL,
    CipherMemo,
    MemoryKeyring,
    Opener,
    combined,
    is_sealed,
    new_key,
    open_document,
    seal_payload,
    sealed_key_ids,
    unwrap,
    wrap,
)
from memledger_platform.eventstore.memory import InMemoryEventStore
from memledger_schemas import commands as c

SECRET = "my phone number is 555-0199"


def _document(payload: dict[str, Any], event_type: str = "memory.asserted") -> dict[str, Any]:
    return {"event_id": "e1", "event_type": event_type, "payload": payload}


def test_the_keys_a_stored_document_was_sealed_with_are_found_without_parsing_it() -> None:
    keyring = MemoryKeyring()
    one, other = (keyring.for_writing("acme", who, "main") for who in ("u1", "u2"))
    content = seal_payload({"content": SECRET}, "memory.asserted", "e1", one)
    triple = seal_payload({"triple": {"subject": "a"}}, "memory.asserted", "e1", other)
    stored = orjson.dumps(_document({**content, **triple, "note": "ml-enc:v1 in prose"}))
    assert sealed_key_ids(stored) == {one.key_id, other.key_id}
    assert sealed_key_ids(orjson.dumps(_document({"content": SECRET}))) == set()


def test_a_sealed_field_opens_with_its_key_and_to_a_placeholder_without() -> None:
    keyring = MemoryKeyring()
    key = keyring.for_writing("acme", "user-7", "main")
    payload = {"item_id": "i", "content": SECRET, "triple": {"subject": "a"}, "kind": "fact"}
    sealed = seal_payload(payload, "memory.asserted", "e1", key)
    assert is_sealed(sealed["content"])
    assert SECRET not in orjson.dumps(sealed).decode()
    assert sealed["kind"] == "fact"  # only personal fields are sealed
    assert open_document(_document(sealed), keyring.key)["payload"] == payload
    assert keyring.destroy("acme", "user-7") == [key.key_id]
    erased = open_document(_document(sealed), keyring.key)["payload"]
    assert erased == {**payload, "content": ERASED, "triple": None}


def test_an_opener_for_a_run_keeps_its_ciphers_until_it_opens_their_subjects_erasure() -> None:
    keyring = MemoryKeyring()
    one, other = (keyring.for_writing("acme", who, "main") for who in ("u1", "u2"))
    alone = _document(seal_payload({"content": SECRET}, "memory.asserted", "e1", one))
    both = _document(seal_payload({"content": SECRET}, "memory.asserted", "e1",
                                  combined([one, other])))
    kept = _document(seal_payload({"content": SECRET}, "memory.asserted", "e1", other))
    run = Opener(keyring).for_run()
    for document in (alone, both, kept):
        assert run(document)["payload"]["content"] == SECRET
    keyring.destroy("acme", "u1")
    # as the keyring's own cache would: the key is gone once the log says so
    assert run(alone)["payload"]["content"] == SECRET
    run({"event_id": "e2", "event_type": "subject.erased", "payload": {"key_id": one.key_id}})
    assert run(alone)["payload"]["content"] == ERASED
    assert run(both)["payload"]["content"] == ERASED
    assert run(kept)["payload"]["content"] == SECRET
    assert Opener(keyring)(alone)["payload"]["content"] == ERASED


def test_a_live_opener_keeps_ciphers_by_key_and_still_opens_nothing_once_a_key_is_gone(
) -> None:
    keyring = MemoryKeyring()
    key = keyring.for_writing("acme", "u1", "main")
    document = _document(seal_payload({"content": SECRET}, "memory.asserted", "e1", key))
    live = Opener(keyring)
    assert [live(document)["payload"]["content"] for _ in range(3)] == [SECRET] * 3
    keyring.destroy("acme", "u1")
    # unlike a run's ciphers, each field still asks the keyring for its key
    assert live(document)["payload"]["content"] == ERASED


def test_a_cipher_memo_makes_one_cipher_per_key_and_starts_again_when_full() -> None:
    memo = CipherMemo(size=2)
    first, second, third = new_key(), new_key(), new_key()
    one = memo(first)
    assert memo(first) is one
    memo(second)
    memo(third)  # full: emptied, then made again
    assert memo(first) is not one
    payload = {"content": SECRET}
    key = MemoryKeyring().for_writing("acme", "u1", "main")
    sealed = seal_payload(payload, "memory.asserted", "e1", key, memo)
    assert open_document(_document(sealed), {key.key_id: key.key}.get, made=memo)[
        "payload"] == payload


def test_a_float32_vector_is_sealed_packed_at_a_fifth_of_its_json_and_opens_to_itself() -> None:
    keyring = MemoryKeyring()
    key = keyring.for_writing("acme", "user-7", "main")
    rng = random.Random(7)
    vector = array("f", [rng.gauss(0, 0.05) for _ in range(384)]).tolist()
    payload = {"item_id": "i", "item_version": 1, "vector": vector}
    sealed = seal_payload(payload, "memory.embedded", "e1", key)
    assert len(sealed["vector"]) < len(orjson.dumps(vector)) / 3  # base64 of 4 bytes each
    assert sealed_key_ids(orjson.dumps(_document(sealed, "memory.embedded"))) == {key.key_id}
    opened = open_document(_document(sealed, "memory.embedded"), keyring.key)["payload"]
    assert opened == payload
    keyring.destroy("acme", "user-7")
    assert open_document(_document(sealed, "memory.embedded"), keyring.key)["payload"][
        "vector"] is None


@pytest.mark.parametrize("vector", [[0.1, 0.2, 0.3], [1e300, 0.5], [0.5, 1, 0.25], [0.5, True],
                                    [0.5, 0.1], [1.0, 1e300]])
def test_a_list_single_precision_does_not_hold_exactly_is_sealed_as_json(vector: list[Any]
                                                                         ) -> None:
    keyring = MemoryKeyring()
    key = keyring.for_writing("acme", "user-7", "main")
    sealed = seal_payload({"vector": vector}, "memory.embedded", "e1", key)
    opened = open_document(_document(sealed, "memory.embedded"), keyring.key)["payload"]
    assert orjson.dumps(opened["vector"]) == orjson.dumps(vector)


@pytest.mark.parametrize("event_type", sorted(PERSONAL))
def test_every_personal_field_has_a_placeholder_of_a_readable_shape(event_type: str) -> None:
    for placeholder in PERSONAL[event_type].values():
        assert placeholder is None or isinstance(placeholder, (str, list, dict))


def test_a_sealed_value_cannot_be_moved_to_another_event() -> None:
    keyring = MemoryKeyring()
    key = keyring.for_writing("acme", "s", "main")
    sealed = seal_payload({"content": SECRET}, "memory.asserted", "e1", key)
    moved = {"event_id": "e2", "event_type": "memory.asserted", "payload": sealed}
    with pytest.raises(InvalidTag):
        open_document(moved, keyring.key)


def test_keys_are_wrapped_by_the_master_key() -> None:
    master, key = new_key(), new_key()
    wrapped = wrap(master, "k1", key)
    assert key not in wrapped
    assert unwrap(master, "k1", wrapped) == key
    with pytest.raises(InvalidTag):
        unwrap(new_key(), "k1", wrapped)


def test_an_erased_subject_writes_again_under_a_new_key() -> None:
    keyring = MemoryKeyring()
    first = keyring.for_writing("acme", "s", "main")
    keyring.destroy("acme", "s")
    assert keyring.for_writing("acme", "s", "main").key_id != first.key_id
    assert keyring.spaces_of("acme", "s") == ["main"]


async def test_the_writer_stores_personal_fields_sealed_with_the_named_subject() -> None:
    store, keyring = InMemoryEventStore(), MemoryKeyring()
    writer = GroupCommitWriter(store, keyring=keyring)
    writer.start()
    try:
        await writer.submit("acme", [c.CreateSpace(space_id="main")])
        made = await writer.submit("acme", [c.AssertMemory(
            space_id="main", kind="fact", content=SECRET, subject_id="user-7")])
        await writer.submit("acme", [c.ReviseMemory(  # names no subject: the item's is used
            space_id="main", item_id=made[0].ids["item_id"], content=SECRET + "!")])
    finally:
        writer.stop()
    events = store.read_all(0, 10)
    raw = b"".join(e.data for e in events).decode()
    assert SECRET not in raw
    asserted, revised = (orjson.loads(e.document()) for e in events[1:])
    assert asserted["subject_id"] == revised["subject_id"] == "user-7"
    assert asserted["key_id"] == revised["key_id"] is not None
    assert open_document(asserted, keyring.key)["payload"]["content"] == SECRET
    space = orjson.loads(events[0].document())
    assert space["key_id"] is None  # nothing personal in it
