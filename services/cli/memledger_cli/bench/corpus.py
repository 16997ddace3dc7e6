"""Synthetic memories for the search benches: distinct sentences from templates, vectors near
real MiniLM embeddings, and the exact nearest neighbours that recall is measured against.

Pure (numpy only, no model, no network), so the shapes can be unit tested; the model that
embeds the base sentences is passed in.
"""

import itertools
import random
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]

_SUBJECTS = (
    "the billing service", "the search cluster", "the nightly backup", "the mobile app",
    "the payments team", "the data pipeline", "the auth gateway", "the staging database",
    "the build cache", "the support queue", "the onboarding flow", "the metrics exporter",
    "the release train", "the invoice generator", "the recommendation model",
    "the warehouse sync", "the email digest", "the admin console", "the rate limiter",
    "the audit log", "the feature flag service", "the image resizer", "the cron scheduler",
    "the customer portal", "the load balancer", "the message broker", "the design system",
    "the checkout page", "the fraud detector", "the translation job", "the log shipper",
    "the vpn tunnel", "the ci runners", "the sso integration", "the cdn edge",
    "the analytics dashboard", "the export worker", "the chat widget", "the schema registry",
    "the disk quota monitor")
_EVENTS = (
    "ran out of memory", "was migrated to a new region", "started timing out",
    "was rolled back", "doubled its latency", "was upgraded", "lost a replica",
    "was rate limited by a partner", "failed its health checks", "was moved to spot instances",
    "had its certificates rotated", "was split into two services", "dropped messages",
    "was paused for maintenance", "filled its disk", "got a new owner",
    "was switched to a cheaper plan", "leaked connections", "was load tested",
    "was deprecated", "gained a read cache", "hit a deadlock", "was audited",
    "was rewritten in rust", "was throttled")
_WHEN = (
    "during the black friday sale", "after the tuesday deploy", "at the end of the quarter",
    "while the on-call engineer was asleep", "during the database failover",
    "right after the config change", "on the first day of the month", "during the demo",
    "when traffic spiked", "after the dependency update")


def base_sentences(count: int, seed: int = 1) -> list[str]:
    """``count`` distinct sentences (at most the templates' 10,000), in a seeded order."""
    combos = list(itertools.product(_SUBJECTS, _EVENTS, _WHEN))
    random.Random(seed).shuffle(combos)
    if count > len(combos):
        raise ValueError(f"at most {len(combos)} base sentences")
    return [f"{s} {e} {w}" for s, e, w in combos[:count]]


def item_text(index: int, base: str) -> str:
    """A memory's content: its base sentence, made distinct by a ticket number."""
    return f"{base}, as noted in ticket {index}"


def query_texts(count: int, seed: int = 2) -> list[str]:
    """``count`` distinct questions about the same subjects and events (never an item's text:
    each query text is new to the server's query-embedding cache)."""
    combos = list(itertools.product(_SUBJECTS, _EVENTS, _WHEN))
    random.Random(seed).shuffle(combos)
    if count > len(combos):
        raise ValueError(f"at most {len(combos)} queries")
    return [f"what happened when {s} {e} {w}?" for s, e, w in combos[:count]]


def noisy(base: Matrix, count: int, sigma: float, seed: int = 3) -> Matrix:
    """``count`` unit vectors: row ``i`` is ``base[i % len(base)]`` plus gaussian noise of
    standard deviation ``sigma`` per component, renormalised."""
    rng = np.random.default_rng(seed)
    rows = base[np.arange(count) % len(base)]
    moved = rows + rng.normal(0.0, sigma, rows.shape).astype(np.float32)
    unit: Matrix = (moved / np.linalg.norm(moved, axis=1, keepdims=True)).astype(np.float32)
    return unit


def exact_top_k(points: Matrix, queries: Matrix, k: int) -> list[list[int]]:
    """The row numbers of each query's ``k`` nearest ``points`` by cosine (both unit), best
    first: brute force, the ground truth of recall."""
    best: list[list[int]] = []
    for start in range(0, len(queries), 256):
        scores = queries[start:start + 256] @ points.T
        top = np.argpartition(-scores, k, axis=1)[:, :k]
        for row, candidates in zip(scores, top, strict=True):
            best.append([int(c) for c in candidates[np.argsort(-row[candidates])]])
    return best


def recall(found: Sequence[Sequence[int]], exact: Sequence[Sequence[int]]) -> float:
    """Mean over queries of |found ∩ exact| / |exact|."""
    shares = [len(set(f) & set(e)) / len(e) for f, e in zip(found, exact, strict=True) if e]
    return sum(shares) / len(shares) if shares else float("nan")
