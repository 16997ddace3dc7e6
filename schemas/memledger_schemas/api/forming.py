"""Answers about what memory formed by itself: a subject's profile and a space's themes."""

from datetime import datetime

from memledger_schemas.api.reads import Basis, Frozen, Item


class ProfileAnswer(Frozen):
    basis: Basis
    space_id: str
    subject: str
    facts: list[Item]
    """Preferences first, then facts; each by predicate, the most confident first."""


class Theme(Frozen):
    theme_id: str
    label: str
    size: int
    """How many memories the theme holds."""
    members: list[str]
    """Item ids, the closest to the theme's centre first (at most 500)."""
    threshold: float
    policy_version: int
    formed_position: int
    updated_position: int
    updated_at: datetime


class ThemeList(Frozen):
    basis: Basis
    space_id: str
    themes: list[Theme]
    """The largest first."""
