"""What ``GET /v1/query/vectors/summary`` answers: the vector read model's digest per space of
the caller's tenant, as of a position (counts and digests only, no content); and what
``GET /v1/query/vectors/graph`` answers: how much of the index its graph covers."""

from pydantic import BaseModel

SUMMARY_PATH = "/v1/query/vectors/summary"
GRAPH_PATH = "/v1/query/vectors/graph"


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


class VectorGraph(BaseModel):
    """The whole index (every tenant's points: an operator's view, admins only)."""

    points: int
    """Points in the index."""
    indexed: int
    """Vectors in the engine's indexes: the dense HNSW graph's and the keyword index's counted
    together (a point with both counts twice); a dense vector in no graph is searched one by
    one until a build."""
    building: bool
    """Whether a graph build is under way (searches are answered meanwhile)."""
