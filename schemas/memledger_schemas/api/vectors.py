"""What ``GET /v1/query/vectors/summary`` answers: the vector read model's digest per space of
the caller's tenant, as of a position (counts and digests only, no content)."""

from pydantic import BaseModel

SUMMARY_PATH = "/v1/query/vectors/summary"


class SpaceSummary(BaseModel):
    space_id: str
    points: int
    current: int
    digest: str


class VectorSummary(BaseModel):
    tenant: str
    as_of_position: int
    projected_position: int
    """How far the vector projector has written (what every query process names)."""
    spaces: list[SpaceSummary]
