"""Typed settings, read once at start-up from ``MEMLEDGER_*`` environment variables and passed
down. A bad value fails start-up with a message naming the variable."""

import base64
import binascii
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from memledger_platform.limits import RateLimiter, RateLimits
from memledger_schemas.subjects import Subjects
from memledger_schemas.types import Slug

ENV_PREFIX = "MEMLEDGER_"
DEFAULT_HTTP_PORT = 8420

Port = int


class SettingsError(ValueError):
    """A setting is missing or invalid; the message names the environment variable."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    mode: Literal["embedded", "distributed"] = Field(
        default="embedded", description="embedded: `memledger up` starts its own engines; "
        "distributed: the engines named by the DSN and URL below")
    home: Path = Field(default=Path(".memledger"),
                       description="data directory of the embedded engines")

    postgres_dsn: str | None = Field(default=None, description="distributed mode: libpq DSN")
    postgres_port: Port | None = Field(default=None, ge=1, le=65_535,
                                       description="embedded PostgreSQL's port (unset: free)")
    postgres_schema: str = Field(
        default="public", pattern=r"^[a-z_][a-z0-9_]{0,62}$", description="schema of the event "
        "store; read models go in `<schema>_rm_<n>` (`memledger_rm_<n>` for `public`)")
    postgres_pool_size: int = Field(default=4, ge=1, le=64,
                                    description="connections per pool of a service")

    nats_url: str | None = Field(default=None, description="distributed mode: nats:// URL, "
                                 "or a cluster's several, comma-separated")
    nats_port: Port | None = Field(default=None, ge=1, le=65_535,
                                   description="embedded nats-server's port (unset: free)")
    nats_prefix: str = Field(default="memledger", pattern=r"^[a-z][a-z0-9_-]{0,31}$",
                             description="subject prefix; stream names derive from it")
    nats_stream_replicas: int = Field(default=1, ge=1, le=5, description="replicas of each "
                                      "JetStream stream (3 on a cluster)")

    http_host: str = Field(default="127.0.0.1", description="address the HTTP and gRPC APIs "
                           "listen on")
    http_port: Port | None = Field(default=None, ge=0, le=65_535, description="HTTP API "
                                   "(unset: 8420, or a free one if busy; set and busy: error)")
    grpc_port: Port | None = Field(default=None, ge=0, le=65_535, description="gRPC API, on "
                                   "http_host (unset: 8430, 8431 for query alone, or a free one)")
    default_tenant: Slug | None = Field(default=None, description="tenant of requests that "
                                        "name none (unset: `default` in embedded mode)")
    http_max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024,
                                     description="larger request bodies get 413")
    http_request_timeout_seconds: float = Field(default=30.0, gt=0, le=3_600, description="a "
                                                "request taking longer gets 504")
    rate_limit_per_second: float = Field(default=5_000.0, ge=0, description="requests per "
                                         "second per tenant; 0 turns the limit off")
    rate_limit_burst: float = Field(default=10_000.0, ge=1, description="requests a tenant may "
                                    "make at once above its rate")
    rate_limit_per_key_per_second: float | None = Field(
        default=None, ge=0, description="requests per second per API key, at most the "
        "tenant's (unset: half of it, so no one key uses up its tenant's allowance); 0 off")
    rate_limit_per_key_burst: float | None = Field(
        default=None, ge=1, description="requests a key may make at once above its rate "
        "(unset: half the tenant's burst)")
    rate_limit_unauthenticated_per_second: float = Field(
        default=10.0, ge=0, description="requests per second per client address that carry "
        "no valid API key (answered 401; past it, 429 for every request from there); 0 off")
    rate_limit_unauthenticated_burst: float = Field(
        default=50.0, ge=1, description="such requests an address may send at once above its "
        "rate")
    master_key: SecretStr | None = Field(
        default=None, description="base64 of 32 random bytes: wraps the data subjects' keys "
        "(personal data is sealed only when set; `memledger up` makes one under its home)")
    auth: Literal["auto", "required", "off"] = Field(
        default="auto", description="API keys: auto requires them except in the embedded mode "
        "on a loopback address")

    writer_max_group_events: int = Field(default=4_000, ge=1, le=100_000, description="commands "
                                         "the writer commits in one transaction at most")
    writer_max_group_bytes: int = Field(
        default=8 * 1024 * 1024, ge=64 * 1024, le=1024 * 1024 * 1024, description="the most "
        "command bytes one commit takes from several requests (one larger request commits "
        "alone)")
    writer_commit_timeout_seconds: float = Field(
        default=20.0, gt=0, le=3_600, description="a commit still running this long is given "
        "up on: its callers get a retryable 503 and the writer carries on; /health says "
        "\"stuck\" meanwhile. Below MEMLEDGER_HTTP_REQUEST_TIMEOUT_SECONDS")
    writer_linger_ms: float = Field(default=2.0, ge=0, le=100, description="how long the "
                                    "writer waits to fill a small group")
    event_partitions: int = Field(
        default=1, ge=1, le=64, description="streams the events are split into by tenant, "
        "each with its own relay, projector and vector projector checkpoint (ADR 0016); 1 is "
        "the one stream. Fixed for a deployment's data: changing it re-maps tenants")
    event_partition: int | None = Field(
        default=None, ge=0, le=63, description="the one partition this relay or projector "
        "process serves (`--partition`; unset: every partition, in one process)")
    relay_batch: int = Field(default=2_000, ge=1, le=100_000,
                             description="events the relay reads and publishes at once")
    relay_poll_seconds: float = Field(default=0.5, gt=0, le=60, description="the relay's "
                                      "polling fallback to NOTIFY")
    projector_batch: int = Field(default=500, ge=1, le=10_000,
                                 description="events per projector transaction")
    clock_skew_seconds: float = Field(
        default=300.0, ge=0, le=86_400, description="how far ahead of the server's clock a "
        "client may say something happened (a message's said_at); later is refused")
    intake_enabled: bool = Field(default=True, description="whether ingest consumes the NATS "
                                 "intake subjects")
    intake_batch: int = Field(default=256, ge=1, le=10_000,
                              description="intake messages fetched at once")

    embedder: Literal["auto", "local", "cohere", "hashing"] = Field(
        default="auto", description="auto: Cohere when a key is set, else the local model; "
        "hashing is a model-free stand-in for tests")
    cohere_api_key: str | None = Field(default=None, repr=False,
                                       description="Cohere's API key (embeddings, rerank, the "
                                       "cohere extractor; with embedder auto, a key turns "
                                       "embeddings to Cohere)")
    cohere_model: str = Field(default="embed-v4.0", description="Cohere embedding model")
    cohere_dims: int = Field(default=1024, ge=1, le=8_192,
                             description="dimensions of Cohere's embeddings")
    cohere_base_url: str | None = Field(default=None, description="another address for "
                                        "Cohere's API (a proxy, a test server)")
    query_embed_timeout_seconds: float = Field(
        default=1.5, gt=0, le=60, description="how long search and context wait for the "
        "query's embedding; past it (or if the embedder fails) they rank by keywords alone "
        "and say so (`degraded: [\"embedder\"]`)")
    reranker: Literal["off", "cohere"] = Field(
        default="off", description="reorder a search's best hits with a reranking model: "
        "cohere (Cohere Rerank, needs MEMLEDGER_COHERE_API_KEY); off by default")
    cohere_rerank_model: str = Field(default="rerank-v3.5", description="Cohere reranking "
                                     "model")
    rerank_depth: int = Field(default=30, ge=1, le=200, description="how many of a search "
                              "layer's best hits the reranker reorders")
    ranking_ask_weight: float = Field(
        default=0.3, ge=0, le=1, description="how far search lowers a conversation message "
        "by the share of its sentences that are questions (its score times 1 - this * share): "
        "a turn that only asks is rarely what answers; 0: off")
    ranking_anchor_weight: float = Field(
        default=0.6, ge=0, le=2, description="how far search lifts an event (a message, an "
        "episode, an observation) in the window of an event-relative expression in the query "
        "that orders (\"before she moved\", \"after the wedding\", \"since I started\"), "
        "resolved by one extra keyword search for the anchor event; 0: off (no extra search)")
    ranking_anchor_around_weight: float = Field(
        default=0.0, ge=0, le=2, description="the same for an expression of the same time "
        "(\"when she moved\", \"while camping\", \"during the workshop\"): the day either "
        "side of the anchor event; 0 (off) by default: on the retrieval benchmark such "
        "expressions more often name a span than one event's day, and the lift lost")
    model_cache_dir: Path | None = Field(
        default=None, description="where the local model's int8 form is kept once built "
        "(unset: $XDG_CACHE_HOME/memledger/models, else ~/.cache/memledger/models)")
    enricher_batch: int = Field(default=64, ge=1, le=1_000,
                                description="events embedded per model call")
    # More than one: with one batch at a time, the model idles during each round trip through
    # ingest (ADR 0006).
    enricher_in_flight: int = Field(default=3, ge=1, le=16, description="batches the "
                                    "enricher has under way at once (the next is embedded "
                                    "while ingest records the last)")
    enricher_reply_timeout_seconds: float = Field(
        default=30.0, gt=0, le=600, description="how long the enricher waits for ingest to "
        "answer a command before it retries")
    extractor: Literal["off", "rules", "cohere"] = Field(
        default="rules", description="what forms memories from conversations (facts, "
        "preferences, entities, relations, session summaries): rules (offline), cohere "
        "(Cohere's chat API, needs MEMLEDGER_COHERE_API_KEY) or off")
    cohere_chat_model: str = Field(default="command-a-03-2025", description="Cohere chat "
                                   "model of the cohere extractor")
    extractor_summary_every: int = Field(default=50, ge=0, le=10_000, description="turns "
                                         "of a running session per summary (0: only when "
                                         "it ends)")
    extractor_timeout_seconds: float = Field(default=30.0, gt=0, le=600, description="how "
                                             "long the extractor's model may take to answer")
    extractor_max_deliveries: int = Field(default=5, ge=1, le=100, description="attempts "
                                          "at a message the extractor's model keeps failing "
                                          "on (timeouts, rate limits) before it is "
                                          "dead-lettered")
    lifecycle_interval_seconds: float = Field(
        default=60.0, ge=0.05, le=86_400, description="how often the lifecycle scheduler "
        "applies the space policies (expiry, retention, decay) and consolidation")
    qdrant_url: str | None = Field(default=None, description="distributed mode: a Qdrant "
                                   "server; otherwise Qdrant Edge under the data directory")
    qdrant_collection: str = Field(default="memledger", pattern=r"^[A-Za-z0-9_-]{1,64}$",
                                   description="the Qdrant collection (distributed mode)")
    vector_batch: int = Field(default=256, ge=1, le=10_000,
                              description="events per vector-index write")
    vector_pace_ms: float = Field(
        default=20.0, ge=0, le=1_000, description="under a stream of writes, the vector "
        "projector takes a batch at most this often, so that a burst of single writes shares "
        "one index write; a write after a quiet spell is taken at once (0: never waits)")

    stop_grace_seconds: float = Field(
        default=10.0, gt=0, le=600, description="how long a service may take to stop after "
        "SIGTERM or SIGINT before it is ended at once (its unacked work is redelivered); "
        "ingest gives up on uncommitted writes after half of it (503 stopping), `up` ends "
        "itself after twice it")

    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="the least severe log line written")
    log_format: Literal["auto", "json", "console"] = Field(
        default="auto", description="JSON lines on stderr; auto: a console renderer on a TTY")
    otlp_endpoint: str | None = Field(
        default=None, pattern=r"^https?://[^/\s]+(/\S*)?$", description="an OpenTelemetry "
        "collector's OTLP/HTTP address (e.g. http://localhost:4318): traces and metrics are "
        "sent there; unset: none are recorded")

    @field_validator("nats_url")
    @classmethod
    def _nats_urls(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = [part.strip() for part in value.split(",")]
        for part in parts:
            if not re.fullmatch(r"(nats|tls|ws|wss)://[^\s/,]+/?", part):
                raise ValueError(f"{part or '(empty)'!r} is not a nats://host:port URL (a "
                                 "cluster's URLs are separated by commas)")
        return ",".join(parts)

    @model_validator(mode="after")
    def _a_key_within_its_tenant(self) -> "Settings":
        key, tenant = self.rate_limit_per_key_per_second, self.rate_limit_per_second
        if key and tenant and key > tenant:
            raise ValueError(f"MEMLEDGER_RATE_LIMIT_PER_KEY_PER_SECOND ({key:g}) must not exceed "
                             f"MEMLEDGER_RATE_LIMIT_PER_SECOND ({tenant:g}): one key could "
                             "then use its tenant's whole allowance")
        return self

    @model_validator(mode="after")
    def _partition_within_partitions(self) -> "Settings":
        if self.event_partition is not None and self.event_partition >= self.event_partitions:
            raise ValueError(f"MEMLEDGER_EVENT_PARTITION ({self.event_partition}) must be below "
                             f"MEMLEDGER_EVENT_PARTITIONS ({self.event_partitions}): partitions "
                             "are numbered from 0")
        return self

    @model_validator(mode="after")
    def _distributed_needs_endpoints(self) -> "Settings":
        if self.mode == "distributed":
            missing = [name for name in ("postgres_dsn", "nats_url") if not getattr(self, name)]
            if missing:
                raise ValueError("distributed mode needs " + " and ".join(
                    ENV_PREFIX + m.upper() for m in missing))
        if self.writer_commit_timeout_seconds >= self.http_request_timeout_seconds:
            raise ValueError(
                "MEMLEDGER_WRITER_COMMIT_TIMEOUT_SECONDS must be below "
                "MEMLEDGER_HTTP_REQUEST_TIMEOUT_SECONDS, so that a stuck commit is answered "
                "with a retryable 503 before the request itself times out")
        if self.master_key is not None:
            _master_bytes(self.master_key)
        for setting, value in (("EMBEDDER", self.embedder), ("RERANKER", self.reranker),
                               ("EXTRACTOR", self.extractor)):
            if value == "cohere" and not self.cohere_api_key:
                raise ValueError(f"MEMLEDGER_{setting}=cohere needs MEMLEDGER_COHERE_API_KEY")
        return self

    @property
    def embedder_kind(self) -> Literal["local", "cohere", "hashing"]:
        if self.embedder == "auto":
            return "cohere" if self.cohere_api_key else "local"
        return self.embedder

    @property
    def master_key_bytes(self) -> bytes | None:
        return None if self.master_key is None else _master_bytes(self.master_key)

    @property
    def rate_limits(self) -> RateLimits:
        """A fresh set of buckets (one per process that answers requests)."""
        tenant_rate, tenant_burst = self.rate_limit_per_second, self.rate_limit_burst
        key_rate = self.rate_limit_per_key_per_second
        key_burst = self.rate_limit_per_key_burst or max(1.0, tenant_burst / 2)
        return RateLimits(
            tenant=_limiter(tenant_rate, tenant_burst),
            key=_limiter(tenant_rate / 2 if key_rate is None else key_rate, key_burst),
            address=_limiter(self.rate_limit_unauthenticated_per_second,
                             self.rate_limit_unauthenticated_burst))

    @property
    def auth_required(self) -> bool:
        if self.auth != "auto":
            return self.auth == "required"
        loopback = self.http_host in ("127.0.0.1", "localhost", "::1")
        return not (self.mode == "embedded" and loopback)

    @property
    def subjects(self) -> Subjects:
        """The names of the first partition this process serves (of the one stream, unless
        partitioned)."""
        return Subjects(self.nats_prefix, self.event_partitions, self.event_partition or 0)

    @property
    def served_partitions(self) -> list[int]:
        """The partitions a relay, projector or vectors process serves: the one named, else
        every one."""
        if self.event_partition is not None:
            return [self.event_partition]
        return list(range(self.event_partitions))

    @property
    def tenant_fallback(self) -> str | None:
        """The tenant of requests that name none: ``default`` in embedded mode, else none."""
        if self.default_tenant is not None:
            return self.default_tenant
        return "default" if self.mode == "embedded" else None


def _limiter(rate: float, burst: float) -> RateLimiter | None:
    return RateLimiter(rate, burst) if rate > 0 else None


def _master_bytes(secret: SecretStr) -> bytes:
    try:
        raw = base64.b64decode(secret.get_secret_value(), validate=True)
    except (ValueError, binascii.Error):
        raise ValueError("MEMLEDGER_MASTER_KEY must be base64") from None
    if len(raw) != 32:
        raise ValueError(f"MEMLEDGER_MASTER_KEY must be 32 bytes (base64), not {len(raw)}")
    return raw


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment (and ``overrides``), or ``SettingsError`` naming the
    variables at fault."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as error:
        raise SettingsError(_describe(error)) from None


def _describe(error: ValidationError) -> str:
    lines = []
    for problem in error.errors():
        field = ".".join(str(part) for part in problem["loc"])
        variable = ENV_PREFIX + field.upper() if field else "settings"
        lines.append(f"{variable}: {problem['msg']}")
    return "invalid settings:\n  " + "\n  ".join(lines)
