"""One place for every setting. Environment variables use the ``SESSION_CORE_`` prefix,
except the two infrastructure addresses that platforms set by their well-known names
(``KAFKA_BOOTSTRAP_SERVERS`` and ``MONGODB_URI``). The comment beside or above each setting is
its documentation: ``docs/settings.md`` is generated from this file
(``python -m shared.settingsdoc``), and the Helm chart's values set them."""

from __future__ import annotations

from functools import lru_cache

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.eventloop import EventLoop

# The services whose own collections (shared/ownership.py) may live in a database of their own,
# and the setting that names it (``Settings.database_of``)
OWN_DATABASE_FIELDS = {"receipts": "mongodb_receipts_database",
                       "dispatcher": "mongodb_dispatcher_database"}


# The store's largest document: MongoDB's BSON limit (16 MiB), which FerretDB reports too.
# Every service that stores an admitted input keeps it whole in one document (storage's
# journal entry and Items, the dispatcher's queued input), so an admitted record — as JSON and
# as BSON — may be at most this, less room for the fields stored with it (ids, sequences,
# timestamps: a few KB). Admission refuses a larger one with 413 (docs/admission.md).
STORE_DOCUMENT_BYTES = 16 * 1024 * 1024
STORED_FORM_MAX_BYTES = STORE_DOCUMENT_BYTES - 256 * 1024


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SESSION_CORE_", extra="ignore")

    # --- infrastructure -------------------------------------------------------------
    # host:port[,host:port…] of the Kafka brokers
    kafka_bootstrap_servers: str = Field(
        default="127.0.0.1:9092",
        validation_alias=AliasChoices(
            "KAFKA_BOOTSTRAP_SERVERS", "SESSION_CORE_KAFKA_BOOTSTRAP_SERVERS"
        ),
    )
    kafka_security_protocol: str = "PLAINTEXT"  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    kafka_sasl_mechanism: str | None = None  # PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
    kafka_sasl_username: str | None = None  # SASL user (from a Secret in the chart)
    kafka_sasl_password: str | None = None  # SASL password (from a Secret in the chart)
    kafka_ssl_cafile: str | None = None  # CA bundle for SSL / SASL_SSL (default: system CAs)
    kafka_ssl_certfile: str | None = None  # client certificate (PEM) for mutual TLS
    kafka_ssl_keyfile: str | None = None  # its private key (PEM), if not in the certfile
    # the MongoDB connection string (MongoDB in production; FerretDB in the local stack)
    mongodb_uri: str = Field(
        default="mongodb://127.0.0.1:27017/",
        validation_alias=AliasChoices("MONGODB_URI", "SESSION_CORE_MONGODB_URI"),
    )
    mongodb_database: str = "session_core"  # the database every service uses, unless below
    # The receipt tracker's own database (its collections: shared/ownership.py); empty: the one
    # above. On FerretDB's SQLite backend a database is one file with one writer: the local
    # stack gives the tracker a database of its own (docs/storage.md, "A writer per database")
    mongodb_receipts_database: str = ""
    # The dispatcher's own database (its collections: shared/ownership.py); empty: the one above
    mongodb_dispatcher_database: str = ""
    mongodb_tls_ca_file: str | None = None  # set → TLS on, with this CA bundle
    mongodb_tls_certificate_key_file: str | None = None  # client cert + key (PEM): mutual TLS

    # --- topics ----------------------------------------------------------------------
    topic_prefix: str = ""  # prepended to every topic name (test isolation, multi-tenancy)
    topic_partitions: int = 6  # partitions of created topics; Sessions are keys, so fixed
    topic_replication_factor: int = 1  # replication factor of created topics
    topic_retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms of created topics; -1 = forever
    create_topics: bool = True  # create missing topics at start (local); false in the chart
    # comma-separated tenants with input topics of their own, ``session.input.<tenant>`` and
    # ``session.input.results.<tenant>``: a record there is that tenant's, whatever it names
    # (the broker's ACLs decide who may write there: docs/security.md)
    input_tenants: str = ""

    # --- logging ---------------------------------------------------------------------
    log_level: str = "INFO"  # DEBUG | INFO | WARNING | ERROR
    log_format: str = "auto"  # auto (JSON unless a TTY) | json | console

    # --- process ---------------------------------------------------------------------
    # uvloop (default; asyncio's own where uvloop is not installed) | asyncio (shared/eventloop.py)
    event_loop: EventLoop = "uvloop"

    # --- admission HTTP --------------------------------------------------------------
    http_host: str = "0.0.0.0"  # admission's listen address
    http_port: int = 8080  # admission's HTTP port (API, /healthz, /readyz; /metrics: health_port)
    # comma-separated ``tenant:sha256hex`` entries (``session-core hash-key``), never plain keys;
    # empty with auth_disabled=false refuses every request
    api_keys: str = ""
    auth_disabled: bool = False  # local use only: every request is tenant "default"
    max_inflight_per_tenant: int = Field(default=256, ge=1)  # /v1 requests being handled; 429
    storage_reply_timeout_ms: int = 10_000  # the 504 budget while waiting for storage
    # admission's store reads (idempotency, Session profile, GETs, /readyz): how long PyMongo
    # looks for a reachable server before admission answers 503 `unavailable` (docs/admission.md)
    store_request_timeout_ms: int = 2_000
    max_concurrent_waits: int = 256  # ?wait=true requests in flight per replica before 429
    max_concurrent_waits_per_tenant: int = 64  # … and per tenant per replica before 429
    # a request body not received within this many seconds → 400, the tenant's slot freed
    body_read_timeout_s: float = Field(default=30.0, gt=0)

    # --- content limits (docs/admission.md gives the reason for each default) ---------
    # request body or session.input record; 413. At most the store's 16 MiB document (a larger
    # body could never be stored); topics take records of 2 × this + 1 MiB
    max_body_bytes: int = Field(default=STORE_DOCUMENT_BYTES, ge=1, le=STORE_DOCUMENT_BYTES)
    max_image_bytes: int = 5 * 1024 * 1024  # decoded bytes per image
    max_image_pixels: int = 40_000_000  # width × height per image
    max_images_per_request: int = 20  # images in one request's parts; 400
    max_parts_per_message: int = 1_000  # content parts of one message; 400
    max_messages_per_request: int = 100  # messages in one request's input; 400
    # The replica's memory limit (the chart sets admission's container limit, 512Mi); admission
    # derives the memory its image decodes may take from it: a quarter per image, half at once
    # on the replica, the whole of it per request — larger images are 413, checked from their
    # headers before decoding (docs/admission.md, "Decoding off the event loop")
    memory_limit_bytes: int = Field(default=512 * 1024 * 1024, ge=64 * 1024 * 1024)

    # --- storage ---------------------------------------------------------------------
    storage_batch_max: int = 500  # records storage decides and writes together
    inline_image_max_bytes: int = 256 * 1024  # larger data URIs go to the image chunk store
    image_chunk_bytes: int = 1024 * 1024  # bytes per image chunk document

    # --- dispatcher ------------------------------------------------------------------
    # a Runtime silent this long is gone: its Sessions are bound again, its running Turns fail
    runtime_heartbeat_timeout_s: float = 15.0
    # an input waiting for an eligible Runtime this long fails its Turn with the reason
    binding_wait_timeout_s: float = 60.0
    # Core's X25519 private key (unpadded base64url, ``session-core seal-key``) for sealed
    # deliveries, the same for the dispatcher (seals) and the receipt tracker (opens); unset:
    # a Runtime that asks for sealed deliveries is not bound (docs/security.md)
    seal_key: str | None = None
    # only Runtimes that ask for sealed deliveries are bound (needs seal_key): no tenant's
    # content is ever on runtime.deliveries in clear
    require_sealed_deliveries: bool = False

    # --- receipt tracker --------------------------------------------------------------
    # the spec's 10-second wait ("at most 10 seconds for a receipt"), not a tuning knob: tests
    # may shorten it, nothing may lengthen or disable it
    receipt_window_s: float = Field(default=10.0, gt=0, le=10.0, allow_inf_nan=False)

    # --- health for the non-HTTP services -------------------------------------------
    health_port: int = 0  # 0 = no health HTTP server; the chart sets one per service
    # the health server's listen address (/healthz, /readyz, /metrics): loopback unless set;
    # the chart sets 0.0.0.0 (the kubelet's probes and the scrape come from outside the pod)
    health_host: str = "127.0.0.1"

    def database_of(self, service: str) -> str:
        """The store database of ``service``'s own collections (``shared/ownership.py``)."""
        field = OWN_DATABASE_FIELDS.get(service)
        own = str(getattr(self, field)) if field else ""
        return own or self.mongodb_database  # storage's, which admission reads


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
