"""The reference pages made from the code are current, and the code says enough to make them."""

from memledger_cli import gendocs
from memledger_schemas.events import CURRENT, HISTORIC


def test_the_committed_generated_pages_are_what_the_code_makes_now() -> None:
    stale = [name for name, text in gendocs.pages().items()
             if (gendocs.DOCS / name).read_text() != text]
    assert stale == [], f"run `make docs` to refresh docs/{', docs/'.join(stale)}"


def test_every_setting_says_what_it_is_for() -> None:
    assert gendocs.undocumented_settings() == []


def test_every_event_version_says_what_happened_in_a_line() -> None:
    silent = [f"{m.event_type} v{m.schema_version}" for m in (*CURRENT, *HISTORIC)
              if not (m.__dict__.get("about") or m.__dict__.get("__doc__"))]
    assert silent == []


def test_the_settings_page_names_each_variable_once_with_its_default() -> None:
    page = gendocs.settings_page()
    assert page.count("| `MEMLEDGER_HTTP_MAX_BODY_BYTES` | `33554432` |") == 1
    assert "| `MEMLEDGER_AUTH` | `auto` |" in page
