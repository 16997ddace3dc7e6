"""The vector index the settings ask for: Qdrant Edge under the data directory, in a process
of its own (embedded), or a Qdrant server (``MEMLEDGER_QDRANT_URL``). One index per embedding
model and keyword encoding: vectors of two models cannot be compared, nor terms of two
encodings, so changing either starts a new index, filled from the log.

The vector projector (the vectors service) owns the embedded index: ``open_index`` starts its
process. Readers (query) reach the same index with ``connect_index``, over the socket that
process serves, or on the Qdrant server.
"""

import re
from pathlib import Path

from memledger_platform.settings import Settings
from memledger_platform.vectorindex import sparse
from memledger_platform.vectorindex.port import VectorIndex

VECTORS_DURABLE = "projector-vectors"
"""The vector projector's durable consumer, before its model's slug: the position it resumes
from and the position it has written are kept under that name (``consumer_positions``)."""


def model_slug(model_id: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", model_id.lower()).strip("-")[:48]


def index_slug(model_id: str) -> str:
    """The name of the index of ``model_id``'s vectors and the keyword encoding's terms (its
    directory or collection, and its projector's durable consumer)."""
    return f"{model_slug(model_id)}-{sparse.ENCODING}"


def projector_durable(model_id: str, partition: int | None = None) -> str:
    """The name under which the index of ``model_id`` is fed and its progress recorded (from
    ``partition``'s events stream, if the events are partitioned)."""
    name = f"{VECTORS_DURABLE}-{index_slug(model_id)}"
    return name if partition is None else f"{name}-p{partition}"


def index_path(settings: Settings, model_id: str) -> Path:
    """Where the embedded index of ``model_id`` keeps its shard."""
    return settings.home.expanduser() / "vectors" / index_slug(model_id)


def index_address(settings: Settings, model_id: str) -> Path:
    """The socket the embedded index of ``model_id`` is served on (beside its shard)."""
    path = index_path(settings, model_id)
    return path.with_name(path.name + ".sock")


def open_index(settings: Settings, model_id: str, dims: int) -> VectorIndex:
    """The index to write (its one writer's): in the embedded mode, its process is started
    here and stops when the index is closed."""
    if settings.qdrant_url:
        return _server_index(settings, model_id, dims)
    from memledger_platform.vectorindex.process import ProcessVectorIndex

    return ProcessVectorIndex(index_path(settings, model_id), dims,
                              address=index_address(settings, model_id),
                              log_level=settings.log_level, log_format=settings.log_format)


def connect_index(settings: Settings, model_id: str, dims: int) -> VectorIndex:
    """The index to read, as its writer keeps it: nothing is started here, and closing it only
    lets go of the connection."""
    if settings.qdrant_url:
        return _server_index(settings, model_id, dims)
    from memledger_platform.vectorindex.remote import SocketVectorIndex

    return SocketVectorIndex(index_address(settings, model_id))


def _server_index(settings: Settings, model_id: str, dims: int) -> VectorIndex:
    from qdrant_client import QdrantClient

    from memledger_platform.vectorindex.qdrant_server import QdrantServerVectorIndex

    return QdrantServerVectorIndex(QdrantClient(url=settings.qdrant_url),
                                   f"{settings.qdrant_collection}-{index_slug(model_id)}", dims)
