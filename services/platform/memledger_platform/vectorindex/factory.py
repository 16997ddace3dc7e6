"""The vector index the settings ask for: Qdrant Edge under the data directory, in a process
of its own (embedded), or a Qdrant server (``MEMLEDGER_QDRANT_URL``). One index per embedding
model and keyword encoding: vectors of two models cannot be compared, nor terms of two
encodings, so changing either starts a new index, filled from the log."""

import re

from memledger_platform.settings import Settings
from memledger_platform.vectorindex import sparse
from memledger_platform.vectorindex.port import VectorIndex


def model_slug(model_id: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", model_id.lower()).strip("-")[:48]


def index_slug(model_id: str) -> str:
    """The name of the index of ``model_id``'s vectors and the keyword encoding's terms (its
    directory or collection, and its projector's durable consumer)."""
    return f"{model_slug(model_id)}-{sparse.ENCODING}"


def open_index(settings: Settings, model_id: str, dims: int) -> VectorIndex:
    slug = index_slug(model_id)
    if settings.qdrant_url:
        from qdrant_client import QdrantClient

        from memledger_platform.vectorindex.qdrant_server import QdrantServerVectorIndex

        return QdrantServerVectorIndex(QdrantClient(url=settings.qdrant_url),
                                       f"{settings.qdrant_collection}-{slug}", dims)
    from memledger_platform.vectorindex.process import ProcessVectorIndex

    return ProcessVectorIndex(settings.home.expanduser() / "vectors" / slug, dims,
                              log_level=settings.log_level, log_format=settings.log_format)
