"""The client's graceful degradation: a circuit breaker per endpoint group, a recall timeout,
and a stale cache that stands in for search and context when memledger cannot answer. A fake
clock and a scripted server (httpx.MockTransport): no network, no waiting."""

from typing import Any

import httpx
import pytest

from memledger_client import (
    NO_RETRY,
    AsyncClient,
    BreakerPolicy,
    CircuitOpen,
    Client,
    NotFound,
    Resilience,
    StaleCache,
    Unavailable,
    Unreachable,
)
from memledger_client.degrade import CircuitBreaker, RecallCache, recall_key
from tests.unit.test_client import BASIS, Server, problem, written


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


SEARCH: dict[str, Any] = {"basis": BASIS, "mode": "planning", "threshold": 0.25,
                          "model": "m", "results": [], "collapsed": {}}


def client(server: Server, clock: FakeClock, **resilience: Any) -> Client:
    return server.client(retry=NO_RETRY, read_your_writes=False,
                         resilience=Resilience(clock=clock, **resilience))


# --- the breaker alone ------------------------------------------------------------------------

def test_a_breaker_opens_after_its_failures_in_a_row_and_lets_one_probe_through_later() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerPolicy(failures=3, recovery_seconds=30), clock)
    for _ in range(2):
        assert breaker.admit() is None
        breaker.failed()
    assert breaker.state == "closed"
    breaker.failed()
    assert (breaker.state, breaker.admit()) == ("open", 30.0)
    clock.now += 30
    assert str(breaker.state) == "half-open"
    assert breaker.admit() is None  # the probe
    assert breaker.admit() == 0.0  # everyone else waits for the probe's answer


def test_a_failed_probe_opens_the_breaker_again_and_a_good_one_closes_it() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerPolicy(failures=1, recovery_seconds=10), clock)
    breaker.failed()
    clock.now += 10
    assert breaker.admit() is None
    breaker.failed()
    assert breaker.state == "open"
    clock.now += 10
    assert breaker.admit() is None
    breaker.succeeded()
    assert (breaker.state, breaker.admit()) == ("closed", None)


def test_a_success_between_failures_starts_the_count_again() -> None:
    breaker = CircuitBreaker(BreakerPolicy(failures=2), FakeClock())
    breaker.failed()
    breaker.succeeded()
    breaker.failed()
    assert breaker.state == "closed"


def test_a_policy_that_could_never_close_or_open_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="failures"):
        BreakerPolicy(failures=0)
    with pytest.raises(ValueError, match="recovery_seconds"):
        BreakerPolicy(recovery_seconds=0)


# --- the client -------------------------------------------------------------------------------

def test_after_five_unanswered_calls_the_client_stops_sending_until_the_probe_is_due() -> None:
    clock, server = FakeClock(), Server(httpx.ConnectError("refused"))
    with client(server, clock) as ml:
        for _ in range(5):
            with pytest.raises(Unreachable):
                ml.item("demo", "x")
        with pytest.raises(CircuitOpen, match=r"read calls .* failed 5 times") as refused:
            ml.item("demo", "x")
        assert len(server.requests) == 5
        assert refused.value.retry_after == pytest.approx(30.0)
        assert ml.breaker_state("read") == "open"


def test_a_failing_group_does_not_stop_the_others() -> None:
    clock = FakeClock()
    server = Server(*[problem(503, "unavailable")] * 5, written(9))
    with client(server, clock) as ml:
        for _ in range(5):
            with pytest.raises(Unavailable):
                ml.item("demo", "x")
        assert ml.create_space("demo").position == 9
        assert (ml.breaker_state("read"), ml.breaker_state("write")) == ("open", "closed")


def test_refusals_that_say_the_server_is_up_never_open_a_breaker() -> None:
    clock, server = FakeClock(), Server(problem(404, "not_found"))
    with client(server, clock) as ml:
        for _ in range(8):
            with pytest.raises(NotFound):
                ml.item("demo", "x")
        assert ml.breaker_state("read") == "closed"


def test_the_breaker_recovers_through_its_probe_once_the_server_answers_again() -> None:
    clock = FakeClock()
    server = Server(*[httpx.ConnectError("refused")] * 5, httpx.Response(200, json=SEARCH))
    with client(server, clock) as ml:
        for _ in range(5):
            with pytest.raises(Unreachable):
                ml.search("sky")
        clock.now += 30
        assert ml.search("sky").stale is False
        assert ml.breaker_state("recall") == "closed"


def test_recall_gets_a_two_second_timeout_plus_the_servers_wait_for_its_position() -> None:
    server = Server(written(3), httpx.Response(200, json=SEARCH))
    with server.client(resilience=Resilience()) as ml:
        ml.create_space("demo")
        ml.search("sky")
    write, search = server.requests
    assert search.extensions["timeout"]["read"] == pytest.approx(2.0 + 2.0)
    assert write.extensions["timeout"]["read"] == pytest.approx(30.0)


def test_without_breakers_a_client_keeps_trying_and_its_timeouts_are_its_own() -> None:
    clock, server = FakeClock(), Server(httpx.ConnectError("refused"))
    with client(server, clock, breaker=None) as ml:
        for _ in range(8):
            with pytest.raises(Unreachable):
                ml.search("sky")
        assert len(server.requests) == 8
        assert ml.breaker_state("recall") == "off"


def test_a_recall_memledger_cannot_answer_comes_from_the_stale_cache_marked_with_its_age() -> None:
    clock = FakeClock()
    server = Server(httpx.Response(200, json=SEARCH), httpx.ConnectError("refused"))
    with client(server, clock, stale=StaleCache(max_age_seconds=600)) as ml:
        fresh = ml.search("sky", spaces=["demo"])
        clock.now += 42
        stale = ml.search("sky", spaces=["demo"])
    assert (fresh.stale, fresh.stale_age_seconds) == (False, None)
    assert (stale.stale, stale.stale_age_seconds) == (True, 42.0)
    assert stale.basis == fresh.basis


def test_the_stale_cache_never_answers_another_request_nor_with_an_answer_too_old() -> None:
    clock = FakeClock()
    server = Server(httpx.Response(200, json=SEARCH), httpx.ConnectError("refused"))
    with client(server, clock, stale=StaleCache(max_age_seconds=60)) as ml:
        ml.search("sky")
        with pytest.raises(Unreachable):
            ml.search("sea")
        clock.now += 61
        with pytest.raises(Unreachable):
            ml.search("sky")


def test_an_open_breaker_is_answered_from_the_stale_cache_too() -> None:
    clock = FakeClock()
    server = Server(httpx.Response(200, json=SEARCH), *[problem(503, "down")] * 5)
    with client(server, clock, stale=StaleCache()) as ml:
        ml.search("sky")
        for _ in range(6):
            assert ml.search("sky").stale is True
        assert len(server.requests) == 6
        assert ml.breaker_state("recall") == "open"


def test_the_cache_keys_ignore_read_your_writes_and_forget_the_least_recent_first() -> None:
    clock = FakeClock()
    assert recall_key("/v1/search", {"query": "a", "min_position": 3, "wait_ms": 10}) == \
        recall_key("/v1/search", {"query": "a"})
    cache = RecallCache(StaleCache(entries=2), clock)
    for name in ("a", "b", "c"):
        cache.put(name, name)
    assert (cache.get("a"), cache.get("c")) == (None, ("c", 0.0))


async def test_the_async_client_degrades_the_same_way() -> None:
    clock = FakeClock()
    server = Server(httpx.Response(200, json=SEARCH), httpx.ConnectError("refused"))
    async with AsyncClient("http://memledger.test", retry=NO_RETRY,
                           transport=httpx.MockTransport(server),
                           resilience=Resilience(clock=clock, stale=StaleCache())) as ml:
        await ml.search("sky")
        for _ in range(5):
            assert (await ml.search("sky")).stale is True
        assert ml.breaker_state("recall") == "open"
        assert (await ml.search("sky")).stale is True
    assert len(server.requests) == 6
