"""``conditions``, the scope as engines filter it, means what ``in_scope`` says, on payloads as
``stored_payload`` stores them; and it is as short as that allows (each condition is checked on
every point a search visits)."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from memledger_platform.vectorindex.port import (
    OPEN,
    Condition,
    Scope,
    conditions,
    in_scope,
    stored_payload,
    written_by,
)


def holds(condition: Condition, payload: dict[str, Any]) -> bool:
    """How Qdrant reads one condition: a missing key fails every one."""
    value = payload.get(condition.key)
    if value is None:
        return False
    if condition.op == "eq":
        return bool(value == condition.value)
    if condition.op == "any":
        return bool(set(value if isinstance(value, list) else [value]) & set(condition.value))
    return bool(value <= condition.value if condition.op == "lte" else value > condition.value)


def bound(low: int, high: int) -> st.SearchStrategy[float]:
    return st.one_of(st.just(OPEN), st.integers(low, high).map(float))


@st.composite
def payloads(draw: st.DrawFn) -> dict[str, Any]:
    sys_from = draw(st.integers(1, 20))
    valid_from = draw(st.integers(0, 20))
    found = {"tenant": draw(st.sampled_from(["acme", "globex"])), "space": "s", "kind": "fact",
             "valid_from": float(valid_from), "valid_to": draw(bound(valid_from + 1, 30)),
             "sys_from": sys_from, "sys_to": draw(bound(sys_from + 1, 30))}
    archived = draw(st.one_of(st.none(), bound(sys_from, 30)))
    if draw(st.booleans()):  # a message: a role, and maybe who said it
        found.update(kind="message", role=draw(st.sampled_from(ROLES)),
                     participant=draw(st.one_of(st.none(), st.sampled_from(PEOPLE))))
    return found if archived is None else {**found, "archived_from": archived}


ROLES, PEOPLE = ["user", "assistant", "tool"], ["Ann", "Bob"]
scopes = st.builds(Scope, tenant=st.just("acme"), valid_at=st.integers(0, 32).map(float),
                   position=st.one_of(st.none(), st.integers(0, 32)),
                   head=st.one_of(st.none(), st.integers(0, 32)),
                   roles=st.lists(st.sampled_from(ROLES), max_size=2).map(tuple),
                   participant=st.one_of(st.none(), st.sampled_from(PEOPLE)))


@settings(max_examples=300)
@given(payloads(), scopes)
def test_the_conditions_hold_on_a_stored_payload_exactly_when_it_is_in_scope(
        payload: dict[str, Any], scope: Scope) -> None:
    stored = stored_payload(payload)
    assert all(holds(c, stored) for c in conditions(scope)) == in_scope(payload, scope)


def test_system_time_is_one_condition_now_and_two_as_of_a_position() -> None:
    def keys(position: int | None) -> list[str]:
        return [c.key for c in conditions(Scope("acme", 1.0, position, spaces=("s",)))]

    assert keys(None) == ["tenant", "valid_from", "valid_to", "sys_until", "space"]
    assert keys(7) == ["tenant", "valid_from", "valid_to", "sys_until", "sys_from", "space"]


@settings(max_examples=300)
@given(payloads(), scopes)
def test_with_a_head_the_engines_and_its_callers_checks_are_a_search_as_of_it(
        payload: dict[str, Any], scope: Scope) -> None:
    if scope.head is None or scope.position is not None:
        return
    stored = stored_payload(payload)
    as_of = Scope("acme", scope.valid_at, scope.head, roles=scope.roles,
                  participant=scope.participant)
    engine = all(holds(c, stored) for c in conditions(scope))
    assert (engine and written_by(stored, scope)) == in_scope(payload, as_of)


def test_a_head_costs_no_condition_more_than_now() -> None:
    now, head = (conditions(Scope("acme", 1.0, head=h, spaces=("s",))) for h in (None, 7))
    assert [c.key for c in head] == [c.key for c in now]
    assert [c.value for c in head if c.key == "sys_until"] == [7]


def test_sys_until_is_the_earlier_of_closing_and_archiving() -> None:
    base = {"tenant": "acme", "sys_from": 1, "sys_to": 9.0}
    assert stored_payload(base)["sys_until"] == 9.0
    assert stored_payload({**base, "archived_from": 4.0})["sys_until"] == 4.0
    assert stored_payload({**base, "sys_to": OPEN})["sys_until"] == OPEN
