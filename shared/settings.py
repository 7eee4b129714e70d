"""One place for every setting. Environment variables use the ``SESSION_CORE_`` prefix,
except the two infrastructure addresses that platforms set by their well-known names
(``KAFKA_BOOTSTRAP_SERVERS`` and ``MONGODB_URI``). Defaults are documented in
``docs/settings.md`` and mirrored in the Helm chart's values."""

from __future__ import annotations

from functools import lru_cache

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SESSION_CORE_", extra="ignore")

    # --- infrastructure -------------------------------------------------------------
    kafka_bootstrap_servers: str = Field(
        default="127.0.0.1:9092",
        validation_alias=AliasChoices(
            "KAFKA_BOOTSTRAP_SERVERS", "SESSION_CORE_KAFKA_BOOTSTRAP_SERVERS"
        ),
    )
    kafka_security_protocol: str = "PLAINTEXT"  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    kafka_sasl_mechanism: str | None = None  # PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
    kafka_sasl_username: str | None = None
    kafka_sasl_password: str | None = None
    kafka_ssl_cafile: str | None = None  # CA bundle for SSL / SASL_SSL (default: system CAs)
    kafka_ssl_certfile: str | None = None  # client certificate (PEM) for mutual TLS
    kafka_ssl_keyfile: str | None = None  # its private key (PEM), if not in the certfile
    mongodb_uri: str = Field(
        default="mongodb://127.0.0.1:27017/",
        validation_alias=AliasChoices("MONGODB_URI", "SESSION_CORE_MONGODB_URI"),
    )
    mongodb_database: str = "session_core"
    mongodb_tls_ca_file: str | None = None  # set → TLS on, with this CA bundle
    mongodb_tls_certificate_key_file: str | None = None  # client cert + key (PEM): mutual TLS

    # --- topics ----------------------------------------------------------------------
    topic_prefix: str = ""  # prepended to every topic name (test isolation, multi-tenancy)
    topic_partitions: int = 6
    topic_replication_factor: int = 1
    topic_retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms of created topics; -1 = forever
    create_topics: bool = True

    # --- logging ---------------------------------------------------------------------
    log_level: str = "INFO"
    log_format: str = "auto"  # auto (JSON unless a TTY) | json | console

    # --- admission HTTP --------------------------------------------------------------
    http_host: str = "0.0.0.0"
    http_port: int = 8080
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

    # --- content limits (docs/decisions.md explains each default) -------------------
    max_body_bytes: int = 32 * 1024 * 1024
    max_image_bytes: int = 5 * 1024 * 1024  # decoded bytes per image
    max_image_pixels: int = 40_000_000  # width × height per image
    max_images_per_request: int = 20
    max_parts_per_message: int = 1_000
    max_messages_per_request: int = 100

    # --- storage ---------------------------------------------------------------------
    storage_batch_max: int = 500
    inline_image_max_bytes: int = 256 * 1024  # larger data URIs go to the image chunk store
    image_chunk_bytes: int = 1024 * 1024

    # --- dispatcher ------------------------------------------------------------------
    runtime_heartbeat_timeout_s: float = 15.0
    binding_wait_timeout_s: float = 60.0

    # --- receipt tracker --------------------------------------------------------------
    # the spec's 10-second wait ("at most 10 seconds for a receipt"), not a tuning knob: tests
    # may shorten it, nothing may lengthen or disable it
    receipt_window_s: float = Field(default=10.0, gt=0, le=10.0, allow_inf_nan=False)

    # --- health for the non-HTTP services -------------------------------------------
    health_port: int = 0  # 0 = no health HTTP server; the chart sets one per service


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
