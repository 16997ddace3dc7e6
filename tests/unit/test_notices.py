"""The projector's notices: what a batch announces, and channels PostgreSQL accepts; the vector
projector's notices of the position it has written."""

import pytest

from memledger_platform import notices
from memledger_platform.consumer_positions import written_notice
from memledger_platform.readmodel import schema


def test_a_notice_of_the_whole_logs_checkpoint_reads_back_as_its_position() -> None:
    assert schema.whole_log_position(schema.projected_notice(1234, None)) == 1234


def test_a_notice_of_one_partitions_checkpoint_is_not_read_as_the_whole_logs() -> None:
    assert schema.whole_log_position(schema.projected_notice(1234, 2)) is None
    assert schema.whole_log_position("") is None


def test_each_base_schema_has_its_own_channel() -> None:
    assert schema.Names("public").projected == "memledger_projected"
    assert schema.Names("tenant_a").projected != schema.Names("tenant_b").projected


def test_a_channel_name_too_long_for_postgresql_becomes_a_digest_of_it() -> None:
    long_a, long_b = "a" * 60 + "_projected", "a" * 59 + "b_projected"
    assert notices.channel("memledger_projected") == "memledger_projected"
    assert len(notices.channel(long_a).encode()) <= 63
    assert notices.channel(long_a) != notices.channel(long_b)


def test_a_written_position_notice_reads_back_as_its_durable_and_position() -> None:
    assert written_notice("vectors-bge-small-p1 1234") == ("vectors-bge-small-p1", 1234)
    for other in ("1234", "vectors ", " 12", "vectors twelve"):
        with pytest.raises(ValueError, match="not a written-position notice"):
            written_notice(other)


def test_the_written_positions_have_a_channel_of_their_own() -> None:
    assert schema.Names("public").written not in (schema.Names("public").projected,
                                                  schema.Names("tenant_a").written)
