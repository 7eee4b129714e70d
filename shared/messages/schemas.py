"""Every record on Kafka names its schema (``{"schema": "runtime.delivery/1", …}``); each name is
spelled here once, as a one-value ``Literal`` type (what the record models of
``shared.messages`` declare) and the constant of its value (what
builders write and consumers compare), and so are the harness and placement names. Nothing else
in the product code spells them (``tests/unit/test_one_model_per_record.py``)."""

from __future__ import annotations

from typing import Any, Final, Literal, get_args


def _value(literal: Any) -> Any:
    """The one value of a one-value ``Literal``."""
    (value,) = get_args(literal)
    return value


# public: producers → admission, admission → producers, storage → consumers
InputSchema = Literal["session.input/1"]
InputResultSchema = Literal["session.input.result/1"]
ItemSchema = Literal["session.item/1"]
# between Core's services
AdmittedSchema = Literal["session.admitted/1"]  # admission → storage
StorageReplySchema = Literal["storage.reply/1"]  # storage → admission, by request_id
StoredSchema = Literal["session.stored/1"]  # storage → dispatcher: durable input to deliver
FactSchema = Literal["core.fact/1"]  # dispatcher / receipt tracker → storage
# Runtimes ↔ Core
RegistrationSchema = Literal["runtime.registration/1"]
DeliverySchema = Literal["runtime.delivery/1"]
ObservationSchema = Literal["runtime.observation/1"]
ControlSchema = Literal["runtime.control/1"]  # test/ops control record for the reference runtime
# every <topic>.dlq
DeadLetterSchema = Literal["dlq.record/1"]

INPUT: Final[InputSchema] = _value(InputSchema)
INPUT_RESULT: Final[InputResultSchema] = _value(InputResultSchema)
ITEM: Final[ItemSchema] = _value(ItemSchema)
ADMITTED: Final[AdmittedSchema] = _value(AdmittedSchema)
STORAGE_REPLY: Final[StorageReplySchema] = _value(StorageReplySchema)
STORED: Final[StoredSchema] = _value(StoredSchema)
FACT: Final[FactSchema] = _value(FactSchema)
REGISTRATION: Final[RegistrationSchema] = _value(RegistrationSchema)
DELIVERY: Final[DeliverySchema] = _value(DeliverySchema)
OBSERVATION: Final[ObservationSchema] = _value(ObservationSchema)
CONTROL: Final[ControlSchema] = _value(ControlSchema)
DEAD_LETTER: Final[DeadLetterSchema] = _value(DeadLetterSchema)

ALL: Final = (INPUT, INPUT_RESULT, ITEM, ADMITTED, STORAGE_REPLY, STORED, FACT, REGISTRATION,
              DELIVERY, OBSERVATION, CONTROL, DEAD_LETTER)

# what a Session runs on (``harness``) and where its model runs (``placement``), in the order of
# the harness table (shared.domain.harness)
HarnessName = Literal["codex", "claude_code", "minimax_code"]
Placement = Literal["none", "openai_hosted", "self_hosted"]
HARNESSES: Final[tuple[HarnessName, ...]] = get_args(HarnessName)
PLACEMENTS: Final[tuple[Placement, ...]] = get_args(Placement)

# the one algorithm of sealed deliveries (shared/sealing.py implements it; spelled here, away
# from the ``cryptography`` import, for the records that only name it)
SealingAlg = Literal["x25519-hkdf-sha256-chacha20poly1305"]
SEALING_ALG: Final[SealingAlg] = _value(SealingAlg)
