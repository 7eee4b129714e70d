"""The records on Kafka, one typed pydantic model per record, and what is generated from them.

- ``schemas``: the schema names and the harness and placement names, each spelled once;
- ``fields``: how a consumer reads a record (strict types, unknown fields kept), shared types;
- ``items`` (``session.item/1``), ``runtime`` (registration, delivery, observation, control),
  ``inputs`` (``session.input/1`` and its result), ``internal`` (between Core's services),
  ``deadletter`` (``dlq.record/1``): the models;
- ``catalog``: each schema → its one model; ``decode``: the one decoder (bytes → model or the
  DLQ reason); ``generate`` and ``asyncapi``: docs/schemas/ and docs/asyncapi.json from them.

Builders (``shared.records``, ``shared.domain.wire``, storage's Items) write plain dicts and are
checked against the models in tests."""
