"""``bench scale``'s checker and exit code: a lost, repeated or misread write fails the run."""

import argparse
from typing import Any

import pytest

from memledger_cli.bench import scale
from memledger_cli.bench.scale_check import Acked, check
from memledger_platform.settings import load_settings

ACKED = [Acked("s", f"item-{n}", n + 1, f"fact {n}") for n in range(3)]


def test_every_acknowledged_write_listed_once_passes() -> None:
    result = check(ACKED, {"s": ["item-0", "item-1", "item-2"]}, [])

    assert result["ok"] is True
    assert (result["acked"], result["lost"], result["repeated"]) == (3, 0, 0)


def test_a_lost_write_fails_and_is_named() -> None:
    result = check(ACKED, {"s": ["item-0", "item-2"]}, [])

    assert result["ok"] is False
    assert result["lost"] == 1
    assert result["examples"]["lost"] == ["s/item-1"]


def test_a_write_listed_twice_fails() -> None:
    result = check(ACKED, {"s": ["item-0", "item-1", "item-2", "item-1"]}, [])

    assert result["ok"] is False
    assert result["examples"]["repeated"] == ["s/item-1"]


def test_a_wrong_read_fails() -> None:
    result = check(ACKED, {"s": ["item-0", "item-1", "item-2"]}, ["item-0 as of 1: 'other'"])

    assert result["ok"] is False
    assert result["wrong_reads"] == 1


def test_an_item_no_acknowledgement_named_is_reported_but_not_a_failure() -> None:
    result = check(ACKED, {"s": ["item-0", "item-1", "item-2", "item-9"]}, [])

    assert result["ok"] is True
    assert result["unexpected"] == 1


def test_configs_parse_and_refuse_what_is_not_ingest_x_query() -> None:
    assert scale.configs("1x1, 2x1,1x2") == [(1, 1), (2, 1), (1, 2)]
    for bad in ("1x0", "2", "ax1"):
        with pytest.raises(argparse.ArgumentTypeError, match="INGESTxQUERY"):
            scale.configs(bad)


@pytest.mark.parametrize(("ok", "code"), [(True, 0), (False, 1)])
def test_the_run_exits_non_zero_when_the_check_fails(monkeypatch: pytest.MonkeyPatch,
                                                     ok: bool, code: int) -> None:
    async def measured(_: argparse.Namespace) -> dict[str, Any]:
        return {"scenario": "scale", "ok": ok}

    monkeypatch.setattr(scale, "_measure", measured)
    assert scale.run(argparse.Namespace(json=True), load_settings()) == code
