"""Themes: a space's memories grouped by meaning. Pure and deterministic.

Grouping is leader clustering over the embeddings, oldest memory first: each memory joins the
theme whose centre (the normalised mean of its members) is most similar to it, if that
similarity reaches the policy's ``theme_cosine``, else it starts a theme of its own. The same
memories and vectors always give the same themes, and a theme keeps its id (from its first
member, its leader) while that member stays. A theme needs ``MIN_MEMBERS`` members.

A theme's label is its most characteristic words: those most frequent among its members and
rarest in the rest of the space (TF-IDF over the space's memories), ties alphabetical.
"""

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from uuid import UUID, uuid5

import numpy as np

from memledger_platform.vectorindex.port import Vector

MIN_MEMBERS = 2
LABEL_WORDS = 3
_NAMESPACE = UUID("d5f0b0a4-2e61-4c7b-8a9d-6f3c1e0b7a52")


@dataclass(frozen=True)
class Member:
    item_id: str
    vector: Vector
    """Unit length."""


@dataclass(frozen=True)
class Theme:
    theme_id: str
    label: str
    members: tuple[str, ...]
    """Closest to the centre first."""
    size: int


def group(members: Sequence[Member], threshold: float) -> list[list[Member]]:
    """The clusters of ``members`` (in the order given: oldest first), each with its leader
    first; clusters smaller than ``MIN_MEMBERS`` are left out."""
    clusters: list[list[Member]] = []
    sums: list[Vector] = []
    dims = members[0].vector.shape[0] if members else 0
    centres = np.zeros((16, dims), dtype=np.float32)  # grown by doubling, rows in use: k
    for member in members:
        k = len(clusters)
        similar = centres[:k] @ member.vector
        best = int(np.argmax(similar)) if k else -1
        if best >= 0 and float(similar[best]) >= threshold:
            clusters[best].append(member)
            sums[best] = sums[best] + member.vector
            centres[best] = _unit(sums[best])
            continue
        if k == len(centres):
            centres = np.vstack([centres, np.zeros_like(centres)])
        clusters.append([member])
        sums.append(member.vector.astype(np.float32))
        centres[k] = _unit(member.vector)
    return [c for c in clusters if len(c) >= MIN_MEMBERS]


def _unit(vector: Vector) -> Vector:
    norm = float(np.linalg.norm(vector))
    return (vector / norm if norm > 0 else vector).astype(np.float32)


def theme_id(tenant: str, space: str, leader: str) -> str:
    return str(uuid5(_NAMESPACE, f"{tenant}/{space}/{leader}"))


def themes(tenant: str, space: str, members: Sequence[Member], threshold: float,
           words: Mapping[str, Counter[str]], limit: int) -> list[Theme]:
    """The themes of a space's ``members`` (oldest first), labelled from ``words`` (each
    item's word counts), each naming at most ``limit`` members."""
    found = []
    frequency = Counter(w for counts in words.values() for w in counts)
    for cluster in group(members, threshold):
        centre = _unit(np.sum([m.vector for m in cluster], axis=0))
        ranked = sorted(cluster, key=lambda m: (-round(float(centre @ m.vector), 6), m.item_id))
        label = label_of([words.get(m.item_id, Counter()) for m in cluster], frequency,
                         len(words))
        found.append(Theme(theme_id(tenant, space, cluster[0].item_id), label,
                           tuple(m.item_id for m in ranked[:limit]), len(cluster)))
    return found


def label_of(member_words: Sequence[Counter[str]], frequency: Counter[str], total: int) -> str:
    """The ``LABEL_WORDS`` words most characteristic of the members: the share of members
    using each, times its rarity in the space (``frequency``: in how many of ``total``
    memories it appears)."""
    using = Counter(w for counts in member_words for w in counts)
    score = {w: (n / len(member_words)) * math.log((1 + total) / (1 + frequency[w])) + 1e-9
             for w, n in using.items()}
    best = sorted(score, key=lambda w: (-round(score[w], 9), w))[:LABEL_WORDS]
    return " · ".join(best) or "untitled"
