"""Integration tests: real engines, each test on its own schema and streams."""

import pytest

# Support modules whose asserts are the comparison itself: their failures show the values.
pytest.register_assert_rewrite("tests.integration.bitemporal_reads")
