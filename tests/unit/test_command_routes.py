"""A command is one handler and one registration: its route (target, reads, handler) and its
authority (who sends it) are declared once."""

import pytest

from memledger_ingest.domain import handlers
from memledger_ingest.domain.targets import ROUTES, register, route_of
from memledger_schemas import commands as c


@pytest.mark.parametrize("command", c.COMMANDS, ids=lambda k: k.__name__)
def test_every_command_has_a_route(command: type[c.CommandBase]) -> None:
    route = route_of(command.model_construct())
    assert route.decide.__module__ == handlers.__name__


def test_a_command_without_a_route_of_its_own_takes_its_base_commands() -> None:
    assert c.DeriveMemory not in ROUTES
    derived = c.DeriveMemory.model_construct()  # type: ignore[call-arg]
    assert route_of(derived) is ROUTES[c.AssertMemory]


def test_a_command_cannot_be_routed_twice() -> None:
    with pytest.raises(ValueError, match="routed twice"):
        register(c.CreateSpace, lambda cmd, ctx: None)(  # type: ignore[arg-type, return-value]
            lambda cmd, ctx, lookup, cur: None)  # type: ignore[arg-type, return-value]


def test_what_only_services_send_is_sent_by_a_service() -> None:
    sent = set().union(*c.SERVICE_COMMANDS.values())
    assert sent >= c.INTERNAL_COMMANDS
    assert c.SERVICE_COMMANDS["query"] == {"record_retrieval"}
    assert all(c.BY_NAME[name].sent_by for name in sent)
