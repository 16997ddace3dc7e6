"""The fault runs' results tables reach the end-of-run summary through the tests' reports, the
only thing a pytest-xdist worker sends back."""

from typing import Any

import pytest

from tests.conftest import FaultTables
from tests.support import FAULT_TABLE


class Terminal:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write_sep(self, sep: str, title: str) -> None:
        self.lines.append(f"{sep * 3} {title}")

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def _report(*properties: tuple[str, Any]) -> pytest.TestReport:
    return pytest.TestReport("t.py::a", ("t.py", 1, "a"), {}, "passed", None, "teardown",
                             user_properties=list(properties))


def test_each_table_in_a_report_is_printed_under_its_own_heading_in_order() -> None:
    tables = FaultTables()
    tables.pytest_runtest_logreport(_report((FAULT_TABLE, "first"), ("other", "not a table")))
    tables.pytest_runtest_logreport(_report())
    tables.pytest_runtest_logreport(_report((FAULT_TABLE, "second")))
    terminal = Terminal()
    tables.pytest_terminal_summary(terminal)  # type: ignore[arg-type]
    assert terminal.lines == ["=== fault injection", "first", "=== fault injection", "second"]
