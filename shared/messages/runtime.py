"""The Core–Runtime records (CONTRACT §2): ``runtime.registration/1`` (Runtimes → dispatcher),
``runtime.delivery/1`` (dispatcher → Runtimes, read by the receipt tracker too),
``runtime.observation/1`` (Runtimes → storage, dispatcher, receipt tracker) and the reference
Runtime's ``runtime.control/1``. One model each: the published schemas and AsyncAPI are
generated from it, every consumer decodes with it (``shared.messages.decode``), and the builders
(``shared.records``, ``shared.domain.wire``, ``runtimes/``) are checked against it
(tests/unit/test_builders_match_models.py).

These records cross to Runtimes outside this repo, so each model is open: a field it does not
declare is kept, never refused."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, Tag

from shared.domain.content import InputContent
from shared.messages import schemas
from shared.messages.fields import CLOSED, READ, CheckedTimestamp, RuntimeId, SessionId, Timestamp

Harness = schemas.HarnessName
Placement = schemas.Placement


# --------------------------------------------------------------------------- registration
class SealedDeliveries(BaseModel):
    """A Runtime's request for sealed deliveries: the public key they are sealed to."""

    model_config = READ
    alg: schemas.SealingAlg
    key: str = Field(description="the Runtime's X25519 public key, 32 bytes, unpadded base64url")


class Capabilities(BaseModel):
    model_config = READ
    message_images: bool
    function_result_images: bool
    sealed_deliveries: SealedDeliveries | None = Field(
        default=None, description="present: Core seals this Runtime's deliveries "
                                  "(docs/security.md, \"Sealed deliveries\")")


# A Runtime's state (the topic is compacted by ``runtime_id``: its last record is it).
class RuntimeRegistration(BaseModel):
    model_config = READ
    schema_: schemas.RegistrationSchema = Field(alias="schema")
    runtime_id: RuntimeId
    harness: Harness
    bridge_protocol: int
    placements: list[Placement]
    capabilities: Capabilities
    status: Literal["ready", "draining", "gone"]
    heartbeat_at: CheckedTimestamp


# --------------------------------------------------------------------------- deliveries
class DeliveryMessage(BaseModel):
    model_config = CLOSED  # Core builds it: the schema lists exactly its fields
    role: Literal["user"]
    content: list[InputContent]


class DeliveryEnvelope(BaseModel):
    """What every delivery carries, whatever its ``kind``: the common part of the three kinds
    below, not a model of its own. A delivery whose ``kind`` this code does not know decodes as
    just this (``shared.messages.decode.DELIVERY``), so it still reaches the Runtime, which
    refuses it with a refusal observation and Core learns why the Turn fails; the DLQ would
    leave Core waiting."""

    model_config = READ
    schema_: schemas.DeliverySchema = Field(alias="schema")
    delivery_id: str
    runtime_id: RuntimeId
    session_id: SessionId
    turn_id: str | None
    kind: str
    incarnation: str | None = Field(
        default=None, description="the Runtime process it was sent to (that process's "
        "registration ``incarnation``): a process of the same Runtime with another incarnation "
        "does not run it (docs/runtime-boundary.md, \"Binding\", restarted under the same id)")


# Messages that start or steer a Turn; a Runtime refuses one without messages (``[]``).
class MessagesDelivery(DeliveryEnvelope):
    kind: Literal["start", "steer"]
    messages: list[DeliveryMessage]


class FunctionResultDelivery(DeliveryEnvelope):
    kind: Literal["function_result"]
    call_id: str
    name: str | None
    success: bool
    content: list[InputContent] = Field(
        description="the output parts (a string output is one text part), then the error text "
                    "as a final text part")


class SealedKey(BaseModel):
    model_config = READ
    kid: str = Field(description="the recipient key's id: its SHA-256, first 16 hex digits")
    epk: str = Field(description="the ephemeral X25519 public key of the key agreement")
    key: str = Field(description="the content key, wrapped for this recipient")


class Sealed(BaseModel):
    """The content fields (``messages`` or ``content``) as JSON, encrypted (shared/sealing.py):
    readable by the Runtime the delivery is addressed to and by Core's receipt tracker."""

    model_config = READ
    alg: schemas.SealingAlg
    nonce: str
    ciphertext: str
    to: list[SealedKey]


class SealedMessagesDelivery(DeliveryEnvelope):
    """``MessagesDelivery`` to a Runtime that asked for sealing: ``messages`` in ``sealed``."""

    kind: Literal["start", "steer"]
    sealed: Sealed


class SealedFunctionResultDelivery(DeliveryEnvelope):
    """``FunctionResultDelivery`` to a Runtime that asked for sealing: ``content`` in
    ``sealed``."""

    kind: Literal["function_result"]
    call_id: str
    name: str | None
    success: bool
    sealed: Sealed


class InterruptDelivery(DeliveryEnvelope):
    """Core failed this Turn while the Runtime runs it (the dispatcher refused an input of it):
    the Runtime ends the native Turn and forwards its end. For any other Turn it does nothing."""

    kind: Literal["interrupt"]
    reason: str = Field(description="why Core failed the Turn (its failed turn Item's reason)")


def _delivery_tag(value: Any) -> str:
    """Which of the delivery models a record is: its ``kind``, sealed or not."""
    if isinstance(value, dict):
        kind, sealed = value.get("kind"), "sealed" in value
    else:
        kind, sealed = getattr(value, "kind", None), hasattr(value, "sealed")
    # a missing or non-string kind is validated as a message delivery, whose error then names
    # ``kind`` (a tag that is not found gives pydantic's anonymous "unable to extract tag")
    tag = "messages" if not isinstance(kind, str) or kind in ("start", "steer") else kind
    return f"{tag}+sealed" if sealed and tag in ("messages", "function_result") else tag


RuntimeDelivery = Annotated[
    Annotated[MessagesDelivery, Tag("messages")]
    | Annotated[SealedMessagesDelivery, Tag("messages+sealed")]
    | Annotated[FunctionResultDelivery, Tag("function_result")]
    | Annotated[SealedFunctionResultDelivery, Tag("function_result+sealed")]
    | Annotated[InterruptDelivery, Tag("interrupt")],
    Discriminator(_delivery_tag)]


# --------------------------------------------------------------------------- observations
class RuntimeObservation(BaseModel):
    """What a harness recorded (``native``: one native record as the harness printed it), or a
    refusal (``native: null`` with ``refusal``)."""

    model_config = READ
    schema_: schemas.ObservationSchema = Field(alias="schema")
    runtime_id: RuntimeId
    session_id: SessionId
    harness: Harness
    observed_at: Timestamp
    native: dict[str, Any] | None
    refusal: dict[str, Any] | None = Field(
        default=None, description="with native: null, the delivery the Runtime refused and why: "
        "delivery_id, kind, reason, terminal, and where they apply call_id and code "
        "(docs/runtime-boundary.md)")


# --------------------------------------------------------------------------- control
class Control(BaseModel):
    """``runtime.control/1`` (tests and operators → the reference Runtime): switches to set."""

    model_config = READ
    schema_: schemas.ControlSchema = Field(alias="schema")
    runtime_id: str
    set: dict[str, Any]
