"""How refusals are told to clients: field paths into the request body, status codes."""

from typing import Any

import pytest
from pydantic import ValidationError

from memledger_ingest.core.writer import Rejected
from memledger_ingest.domain.errors import Conflict, DomainError, Invalid, NotFound
from memledger_ingest.entrypoints.problems import invalid_request, refused
from memledger_schemas.commands import BY_NAME, AssertMemory, CommandBatch

ITEM = "00000000-0000-0000-0000-000000000003"


def validation_error(model: Any, body: dict[str, Any]) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(body)
    return caught.value


def paths(body: dict[str, Any]) -> list[str]:
    problem = invalid_request(validation_error(CommandBatch, body))
    return [f["path"] for f in problem.fields]


def test_a_batch_error_is_reported_at_the_field_path_without_the_command_tag() -> None:
    body = {"commands": [
        {"command": "create_space", "space_id": "notes"},
        {"command": "assert_memory", "space_id": "notes", "kind": "fact", "content": ""},
    ]}

    assert paths(body) == ["commands.1.content"]


def test_every_faulty_field_of_every_command_is_listed() -> None:
    body = {"commands": [
        {"command": "assert_memory", "space_id": "no.dots", "kind": "rumour", "content": "x"},
        {"command": "record_feedback", "space_id": "notes", "item_id": ITEM, "signal": "used",
         "comment": ""},
    ]}

    listed = paths(body)

    assert listed == ["commands.0.space_id", "commands.0.kind", "commands.1.comment"]
    assert not any(part in BY_NAME for path in listed for part in path.split("."))


def test_a_nested_field_keeps_its_full_path() -> None:
    body = {"commands": [{"command": "assert_memory", "space_id": "notes", "kind": "fact",
                          "content": "x", "sources": [{"type": "nowhere", "ref": "r"}]}]}

    assert paths(body) == ["commands.0.sources.0.type"]


def test_a_whole_command_error_is_reported_at_the_command() -> None:
    body = {"commands": [{"command": "revise_memory", "space_id": "notes", "item_id": ITEM}]}

    assert paths(body) == ["commands.0"]


def test_an_unknown_command_is_reported_at_the_command() -> None:
    assert paths({"commands": [{"command": "delete_everything"}]}) == ["commands.0"]


def test_an_empty_batch_is_reported_at_the_commands_list() -> None:
    assert paths({"commands": []}) == ["commands"]


def test_the_invalid_request_problem_is_a_422_whose_message_names_the_fields() -> None:
    body = {"commands": [{"command": "assert_memory", "space_id": "notes", "kind": "fact",
                          "content": ""}]}

    problem = invalid_request(validation_error(CommandBatch, body))

    assert (problem.status, problem.code) == (422, "invalid_request")
    assert "commands.0.content" in problem.message
    (field,) = problem.body()["error"]["fields"]
    assert field["path"] == "commands.0.content"
    assert field["reason"]


def test_a_single_command_error_can_be_prefixed_with_its_place_in_a_batch() -> None:
    error = validation_error(AssertMemory, {"space_id": "notes", "kind": "fact", "content": ""})

    problem = invalid_request(error, prefix=("commands", 3))

    assert [f["path"] for f in problem.fields] == ["commands.3.content"]


def test_a_single_command_error_is_reported_at_its_own_field() -> None:
    error = validation_error(AssertMemory, {"space_id": "notes", "kind": "fact", "content": ""})

    assert [f["path"] for f in invalid_request(error).fields] == ["content"]


# --- refusals by the domain -----------------------------------------------------------------


@pytest.mark.parametrize(("error", "status", "code"), [
    pytest.param(NotFound("memory item", ITEM), 404, "not_found", id="not_found"),
    pytest.param(Conflict("space 'notes' is archived", 4), 409, "conflict", id="conflict"),
    pytest.param(Invalid("superseded_by", "an item cannot supersede itself"), 422,
                 "invalid_request", id="invalid"),
    pytest.param(DomainError("refused"), 400, "refused", id="other"),
])
def test_each_domain_refusal_maps_to_its_status(error: DomainError, status: int,
                                                code: str) -> None:
    for raised in (error, Rejected(0, error)):
        problem = refused(raised)
        assert (problem.status, problem.code) == (status, code)
        assert problem.body()["error"]["status"] == status


def test_a_conflict_carries_the_current_version() -> None:
    problem = refused(Rejected(0, Conflict("expected version 1, stream is at 4", 4)))

    assert problem.body()["error"]["current_version"] == 4
    assert "command_index" not in problem.body()["error"]


def test_a_conflict_in_a_batch_says_which_command_and_the_current_version() -> None:
    problem = refused(Rejected(2, Conflict("stream is at 4", 4)), batch=True)

    error = problem.body()["error"]
    assert (error["status"], error["current_version"], error["command_index"]) == (409, 4, 2)


def test_a_not_found_in_a_batch_says_which_command() -> None:
    problem = refused(Rejected(1, NotFound("space", "nowhere")), batch=True)

    assert problem.status == 404
    assert problem.extra == {"command_index": 1}
    assert "nowhere" in problem.message


def test_an_invalid_command_is_reported_at_its_field() -> None:
    problem = refused(Rejected(0, Invalid("superseded_by", "an item cannot supersede itself")))

    assert problem.fields == ({"path": "superseded_by",
                               "reason": "an item cannot supersede itself"},)


def test_an_invalid_command_in_a_batch_is_reported_at_its_path_in_the_batch() -> None:
    problem = refused(Rejected(3, Invalid("idempotency_key", "already used")), batch=True)

    assert problem.status == 422
    assert [f["path"] for f in problem.fields] == ["commands.3.idempotency_key"]
    assert problem.message.startswith("commands.3.idempotency_key")
    assert problem.extra == {"command_index": 3}
