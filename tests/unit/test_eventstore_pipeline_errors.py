"""Which error an append on PostgreSQL reports when a statement of its pipeline fails."""

import psycopg
from psycopg import errors

from memledger_platform.eventstore.postgres import _first_error


def _raised_during(first: psycopg.Error, then: psycopg.Error) -> psycopg.Error:
    """``then`` as Python makes it when raised while ``first`` propagates (a pipeline's exit
    reading the skipped statements' results in a ``finally``)."""
    try:
        try:
            raise first
        finally:
            raise then
    except psycopg.Error as raised:
        return raised


def test_the_statement_that_failed_is_reported_not_the_ones_skipped_after_it() -> None:
    conflict = errors.UniqueViolation("duplicate key")
    raised = _raised_during(conflict, errors.PipelineAborted("pipeline aborted"))
    assert _first_error(raised) is conflict


def test_an_error_of_its_own_is_reported_as_it_is() -> None:
    lost = psycopg.OperationalError("server closed the connection")
    assert _first_error(lost) is lost
    aborted = errors.PipelineAborted("pipeline aborted")  # nothing before it: itself
    assert _first_error(aborted) is aborted
