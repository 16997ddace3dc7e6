"""`bench embed` measures the enricher's work on events it decodes, and fails when it did not
embed every text: a skipped event costs nothing and would read as speed."""

import argparse
import asyncio

import orjson
import pytest

from memledger_cli.bench import embed
from memledger_platform.events import decode


def test_the_bench_events_decode_as_the_relay_publishes_them() -> None:
    event = decode(embed._event("Ada moved to Lisbon.", 7))
    assert (event.position, event.event_type) == (7, "memory.asserted")
    assert event.payload["content"] == "Ada moved to Lisbon."
    assert orjson.loads(embed._event("x", 7))["global_position"] == 7


def test_a_run_embeds_every_text_and_reports_it() -> None:
    result = asyncio.run(embed._measure(argparse.Namespace(texts=70)))
    assert result["texts"] == 70
    assert result["commands"] >= 70
    assert result["raw_model_texts_per_s"] > 0


def test_a_run_whose_enricher_skipped_texts_fails() -> None:
    intake = embed._Intake()
    with pytest.raises(RuntimeError, match="embedded 0 of 3 texts"):
        embed._every_text_embedded(intake, 3)
