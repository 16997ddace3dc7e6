"""`memledger status`: what counts as caught up, how it prints, what it never shows."""

from memledger_cli.status import Consumer, DeadLetters, Projection, Relay, Status, redact
from memledger_cli.status_view import lines


def _status(**changes: object) -> Status:
    status = Status("distributed", "postgresql://u:***@db/m", "nats://u:***@nats:4222",
                    committed_position=12, relay=Relay("MEMLEDGER_EVENTS", 12, 12, 0),
                    projections=[Projection("postgres", "memledger_rm_1", 12, 0)],
                    consumers=[Consumer("MEMLEDGER_EVENTS", "projector-postgres", 0, 0, 0, 1,
                                        12, 12, 0)],
                    dead_letters=DeadLetters("MEMLEDGER_DLQ", 1, {"memledger.dlq.intake.a": 1}))
    for name, value in changes.items():
        setattr(status, name, value)
    return status


def test_passwords_never_reach_the_screen() -> None:
    assert redact("postgresql://memledger:s3cret@db:5432/m") == "postgresql://memledger:***@db:5432/m"
    assert redact("nats://relay:p%40ss@nats:4222") == "nats://relay:***@nats:4222"
    assert redact("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"


def test_caught_up_means_no_lag_nothing_pending_and_every_figure_read() -> None:
    assert _status().caught_up
    assert not _status(relay=Relay("MEMLEDGER_EVENTS", 10, 10, 2)).caught_up
    assert not _status(consumers=[Consumer("MEMLEDGER_INTAKE", "ingest-intake", 3, 0, 0, 0, 5,
                                           None, None)]).caught_up
    assert not _status(errors=["nats: NoServersError"]).caught_up
    assert not _status(relay=None).caught_up


def test_dead_letters_do_not_make_it_behind_but_are_listed_per_subject() -> None:
    printed = lines(_status())
    assert "dead letters memledger.dlq.intake.a: 1" in printed
    assert printed[-1] == "caught up: yes"


def test_plain_lines_carry_one_stage_each() -> None:
    printed = lines(_status())
    assert "relay: stream=MEMLEDGER_EVENTS position=12 sequence=12 lag=0" in printed
    assert "projection postgres: source=memledger_rm_1 position=12 lag=0" in printed
    assert ("consumer MEMLEDGER_EVENTS/projector-postgres: pending=0 unacked=0 redelivered=0 "
            "waiting=1 acked_sequence=12 acked_position=12 lag=0") in printed
