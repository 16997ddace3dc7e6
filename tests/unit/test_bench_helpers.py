"""The pure helpers of the search and retrieval benches: synthetic corpus, exact neighbours and
recall, the server's CPU from /proc lines, and SituatedQA answer timelines."""

import argparse
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from nats.js.api import ConsumerConfig, ConsumerInfo

from memledger_cli.bench import corpus, readside, settle
from memledger_cli.bench import situatedqa as sqa


def test_base_sentences_and_queries_are_distinct_and_repeatable() -> None:
    bases = corpus.base_sentences(2_000)
    queries = corpus.query_texts(500)
    assert len(set(bases)) == 2_000
    assert bases == corpus.base_sentences(2_000)
    assert len(set(queries)) == 500
    assert not set(queries) & set(bases)


def test_noisy_vectors_are_unit_length_and_stay_near_their_base() -> None:
    base = np.eye(4, dtype=np.float32)
    vectors = corpus.noisy(base, 8, sigma=0.05)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert all(vectors[i] @ base[i % 4] > 0.9 for i in range(8))


def test_exact_top_k_orders_by_cosine_and_recall_counts_the_overlap() -> None:
    points = np.array([[1, 0], [0.8, 0.6], [0, 1], [-1, 0]], dtype=np.float32)
    queries = np.array([[1, 0], [0, 1]], dtype=np.float32)
    exact = corpus.exact_top_k(points, queries, 2)
    assert exact == [[0, 1], [2, 1]]
    assert corpus.recall([[0, 3], [1, 2]], exact) == 0.75


def test_a_stat_line_with_spaces_and_parentheses_in_the_name_parses() -> None:
    line = "4242 (python (x) y) S 17 4242 4242 0 -1 4194304 1 0 0 0 150 25 0 0 20 0 3 0"
    assert settle.parse_stat(line) == (4242, 17, 175)


def test_the_ticks_of_reaped_children_are_read_from_their_own_fields() -> None:
    line = "4242 (python (x) y) S 17 4242 4242 0 -1 4194304 1 0 0 0 150 25 40 2 20 0 3 0"
    assert settle.reaped_ticks(line) == 42


def test_descendants_ticks_sums_the_whole_subtree_but_not_the_root_or_strangers() -> None:
    stats = [(1, 0, 1_000), (10, 1, 5), (11, 10, 7), (12, 11, 3), (20, 1, 100), (13, 10, 2)]
    assert settle.descendants_ticks(10, stats) == 7 + 3 + 2


def row(day: str, *answers: str, start: bool = False) -> sqa.Row:
    at = sqa.parse_date(day)
    assert at is not None
    return sqa.Row("q", "who leads?", at, frozenset(map(sqa.normalise, answers)), start,
                   answers[0])


def test_an_answer_holds_from_its_first_date_until_the_next_answer_is_given() -> None:
    rows = [row("2019", "Bob"), row("2010", "Ann"), row("2015", "ann "),
            row("May 01, 2018", "Bob", start=True)]
    segments = sqa.timeline(rows)
    assert [(s.shown, s.valid_from.year, s.valid_to) for s in segments] == [
        ("Ann", 2010, datetime(2018, 5, 1, tzinfo=UTC)), ("Bob", 2018, None)]
    assert sqa.latest(rows).answers == {"bob"}


def test_two_answers_for_one_instant_keep_the_start_row_and_an_answer_may_come_back() -> None:
    rows = [row("2010", "Ann"), row("2012", "Ann"), row("2012", "Bob", start=True),
            row("2016", "Ann", start=True)]
    assert [(s.shown, s.valid_from.year) for s in sqa.timeline(rows)] == [
        ("Ann", 2010), ("Bob", 2012), ("Ann", 2016)]


@pytest.mark.parametrize(("text", "expected"), [
    ("2019", datetime(2019, 1, 1, tzinfo=UTC)),
    ("December 13, 1999", datetime(1999, 12, 13, tzinfo=UTC)),
    ("sometime", None)])
def test_dates_are_years_or_full_dates(text: str, expected: datetime | None) -> None:
    assert sqa.parse_date(text) == expected


def test_a_missing_data_directory_names_the_option_and_the_variable(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--situatedqa DIR or set MEMLEDGER_BENCH_SITUATEDQA"):
        sqa.data_dir(str(tmp_path))


@pytest.mark.parametrize("value", ["0", "-2", "three"])
def test_bench_rebuild_runs_must_be_a_whole_number_of_at_least_one(
        value: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    readside.REBUILD.add_arguments(parser)

    with pytest.raises(SystemExit):
        parser.parse_args(["--runs", value])

    assert "argument --runs" in capsys.readouterr().err
    assert parser.parse_args(["--runs", "5"]).runs == 5


def test_rebuilt_models_are_equal_only_if_every_run_compared_equal() -> None:
    assert readside._all_equal([True, True, True]) is True
    assert readside._all_equal([True, None, True]) is None
    assert readside._all_equal([None, False, True]) is False


@pytest.mark.parametrize(("pending", "unsettled", "paused", "behind"), [
    (0, 0, False, False), (12, 0, False, True), (0, 3, False, True), (12, 3, True, False)])
def test_the_enricher_is_behind_while_its_consumer_has_events_to_deliver_or_settle(
        pending: int, unsettled: int, paused: bool, behind: bool) -> None:
    """A paused enricher delivers nothing: an ingest phase must not wait for it."""
    info = ConsumerInfo(name="enricher", stream_name="events", config=ConsumerConfig(),
                        created=datetime(2026, 1, 1, tzinfo=UTC), num_pending=pending,
                        num_ack_pending=unsettled, paused=paused)
    assert settle.enricher_behind(info) is behind


async def _graph_server(answers: list[tuple[int, bool]]) -> tuple[web.AppRunner, str]:
    """A server answering ``GET /v1/query/vectors/graph`` from ``answers`` (status, building),
    one a request, the last one again once they run out; ``indexed`` counts the requests."""
    asked = 0

    async def graph(_: web.Request) -> web.Response:
        nonlocal asked
        asked += 1
        status, building = answers.pop(0) if len(answers) > 1 else answers[0]
        return web.json_response({"points": 9, "indexed": asked, "building": building},
                                 status=status)

    app = web.Application()
    app.router.add_get("/v1/query/vectors/graph", graph)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


async def test_a_build_is_waited_out_until_none_is_seen_twice_in_a_row() -> None:
    # not building once between two builds (one followed the other) is not the end
    runner, url = await _graph_server([(200, True), (200, False), (200, True), (200, False),
                                       (200, False), (200, True)])
    try:
        async with aiohttp.ClientSession(url) as http:
            _, graph = await settle.wait_built(http, limit=30, every=0)
    finally:
        await runner.cleanup()
    assert graph == {"points": 9, "indexed": 5, "building": False}  # the fifth answer


async def test_a_server_that_does_not_tell_its_graph_is_not_waited_on() -> None:
    runner, url = await _graph_server([(403, True)])
    try:
        async with aiohttp.ClientSession(url) as http:
            assert (await settle.wait_built(http, limit=30, every=0))[1] == {}
    finally:
        await runner.cleanup()


def test_a_server_loaded_with_a_million_points_may_stay_busy_past_its_graph_build() -> None:
    # The graph over a million points took 1,019 s here after the load (bench search): a
    # fixed 15 minutes would have called that server hung while it built.
    assert settle.busy_limit(1_000_000) > 2 * 1_019
    assert settle.busy_limit(1_000) == 900.0
