"""Packing an agent's context: sections in priority order, each within its share, what one
leaves unused passed on, the session told in time order, and never more than the budget."""

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from memledger_query.core.context import (
    DEFAULT_SHARES,
    ORDER,
    TITLES,
    Entry,
    Section,
    pack,
    render,
    tokens,
)

EVEN = dict.fromkeys(ORDER, 100)
BUDGET = 100 * len(ORDER)
"""Equal shares: a budget of ``BUDGET`` gives each section 100 tokens of its own."""


def entry(ref: str, size: int = 50) -> Entry:
    """An entry costing ``size`` tokens as a line (text and newline: 4 * size characters)."""
    return Entry(f"{ref}:".ljust(4 * size - 1, "."), ref)


def refs(section: Section) -> list[str]:
    return [e.ref for e in section.entries]


def by_name(sections: list[Section]) -> dict[str, Section]:
    return {s.name: s for s in sections}


def test_tokens_are_estimated_as_a_quarter_of_the_characters_rounded_up() -> None:
    assert [tokens(""), tokens("abc"), tokens("abcd"), tokens("abcde")] == [0, 1, 1, 2]
    assert entry("x", 50).tokens == 50


def test_sections_come_in_priority_order_and_render_in_it() -> None:
    candidates: dict[str, Sequence[Entry]] = {name: [entry(name, 10)]
                                              for name in reversed(ORDER)}
    sections = pack(candidates, BUDGET, EVEN)
    assert [s.name for s in sections] == list(ORDER)
    text = render(sections)
    positions = [text.index(TITLES[name]) for name in ORDER]
    assert positions == sorted(positions)
    assert text.startswith(TITLES["session"] + "\n")


def test_a_section_takes_its_best_candidates_that_fit_its_share() -> None:
    memories = [entry("m1"), entry("m2"), entry("m3")]
    sections = by_name(pack({"session": [entry("s1", 90)], "memories": memories}, BUDGET, EVEN))
    # 105 tokens (its 100 and the 5 the session left): the 6-token header and one 50-token
    # entry; a second would need 106.
    assert refs(sections["memories"]) == ["m1"]
    assert sections["memories"].used == 56


def test_a_candidate_too_large_is_skipped_and_smaller_ones_after_it_still_fit() -> None:
    memories = [entry("huge", 500), entry("small", 10)]
    sections = by_name(pack({"session": [entry("s1", 90)], "memories": memories}, BUDGET, EVEN))
    assert refs(sections["memories"]) == ["small"]


def test_what_a_section_leaves_unused_flows_to_the_next() -> None:
    memories = [entry(f"m{i}") for i in range(1, 6)]
    sections = by_name(pack({"memories": memories}, BUDGET, EVEN))
    # The empty session's 100 tokens join the memories' 100: header 6 + 3 * 50 fits in 200.
    assert sections["session"].used == 0
    assert sections["memories"].allowance == 200
    assert refs(sections["memories"]) == ["m1", "m2", "m3"]


def test_unused_tokens_keep_flowing_down_to_the_last_section() -> None:
    themes = [entry(f"t{i}") for i in range(1, 13)]
    sections = by_name(pack({"themes": themes}, BUDGET, EVEN))
    assert sections["themes"].allowance == BUDGET
    # 600 tokens: the 3-token header and eleven 50-token entries; a twelfth would need 603.
    assert refs(sections["themes"]) == [f"t{i}" for i in range(1, 12)]


def test_themes_have_no_share_of_their_own_by_default_only_what_is_left() -> None:
    themes = [entry("t1")]
    full = {name: [entry(f"{name[0]}{i}", 2) for i in range(2_000)] for name in ORDER[:-1]}
    assert refs(by_name(pack({**full, "themes": themes}, 3_800))["themes"]) == []
    assert refs(by_name(pack({"themes": themes}, 3_800))["themes"]) == ["t1"]


def test_a_partly_used_share_passes_on_only_what_was_not_used() -> None:
    sections = pack({"session": [entry("s1", 60)]}, 400, {"session": 100, "memories": 300})
    assert sections[0].used == 65
    assert sections[1].allowance == 300 + 100 - 65


def test_the_session_is_filled_newest_first_and_told_oldest_first() -> None:
    newest_first = [entry("turn 4", 30), entry("turn 3", 30), entry("turn 2", 30),
                    entry("turn 1", 30)]
    [session, *_] = pack({"session": newest_first}, BUDGET, EVEN)
    # 100 tokens: header 5 and three 30-token turns; the oldest turn is what is left out.
    assert refs(session) == ["turn 2", "turn 3", "turn 4"]
    rendered = session.render()
    assert rendered.index("turn 2") < rendered.index("turn 3") < rendered.index("turn 4")


def test_other_sections_keep_their_best_first_order() -> None:
    sections = by_name(pack({"memories": [entry("best", 10), entry("next", 10)]}, BUDGET, EVEN))
    assert refs(sections["memories"]) == ["best", "next"]


def test_no_shares_means_the_default_shares() -> None:
    assert pack({"session": [entry("s")]}, 3_300) == pack({"session": [entry("s")]}, 3_300,
                                                          DEFAULT_SHARES)


def test_an_entry_is_one_line_whatever_its_text_holds() -> None:
    multi = Entry("first\nsecond\nthird", "m")
    history = by_name(pack({"history": [multi]}, BUDGET, EVEN))["history"]
    assert history.render() == TITLES["history"] + "\nfirst second third\n"


def test_an_empty_section_renders_nothing_not_even_its_header() -> None:
    assert render(pack({}, BUDGET, EVEN)) == ""


# --- the budget holds, whatever the candidates and shares ----------------------------------

texts = st.one_of(st.text(max_size=200), st.integers(0, 200_000).map(lambda n: "x" * n),
                  st.text(alphabet="ab\n ", max_size=40))
candidate_lists = st.lists(st.builds(Entry, texts, st.text(max_size=8)), max_size=12)


@settings(max_examples=200, deadline=None)
@given(candidates=st.dictionaries(st.sampled_from(ORDER), candidate_lists),
       budget=st.integers(0, 20_000),
       shares=st.dictionaries(st.sampled_from(ORDER), st.integers(0, 5_000)))
def test_a_bundle_never_costs_more_than_its_budget(
        candidates: dict[str, Sequence[Entry]], budget: int, shares: dict[str, int]) -> None:
    sections = pack(candidates, budget, shares)
    assert sum(s.used for s in sections) <= budget
    assert tokens(render(sections)) <= budget
    assert all(s.used <= s.allowance for s in sections)
    assert all(set(s.entries) <= set(candidates.get(s.name, ())) for s in sections)
