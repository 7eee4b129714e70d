"""Admission's use cases, shared by the HTTP API and the ``session.input`` topic so both answer
identically: validate (pure domain), check identities against the store (read only), hand the
admitted input to storage over ``session.admitted`` (acks=all) and wait for the stored answer."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import bson
from aiokafka import AIOKafkaProducer
from opentelemetry.trace import Tracer
from pymongo.asynchronous.database import AsyncDatabase

from services.admission.domain import validation as rules
from services.admission.domain.validation.limits import IMAGE_DECODE_WORKERS
from services.admission.domain.waiting import TurnWatch
from services.admission.parsing import BodyCheck
from services.admission.priority import lower_priority
from services.admission.tails import ItemTail, ReplyTail
from shared import itemstore
from shared.domain import errors, idempotency
from shared.domain.errors import ApiError
from shared.domain.tenancy import DEFAULT_TENANT
from shared.ids import is_id, new_id
from shared.kafka import encode, max_record_bytes, now_rfc3339, send_counted
from shared.logging import bound, get_logger
from shared.metrics import ADMISSION_SECONDS, Stopwatch
from shared.settings import STORE_DOCUMENT_BYTES, STORED_FORM_MAX_BYTES, Settings
from shared.store import Doc
from shared.storecodec import unpack
from shared.storekeys import call_key, create_key, event_key
from shared.topics import Topics
from shared.watch import Watch

log = get_logger(__name__)
Json = dict[str, Any]
PROFILE_CACHE = 100_000
T = TypeVar("T")
RECORD_ROOM = 64 * 1024  # a record's key, headers and batch framing
CATCH_UP_PAGE = 200


@dataclass
class Answer:
    status: int
    body: Json
    headers: dict[str, str] = field(default_factory=dict)
    session_id: str | None = None

    @classmethod
    def error(cls, err: ApiError) -> Answer:
        return cls(err.status, err.body())


@dataclass(frozen=True)
class Profile:
    """What admission needs of a stored Session; none of it ever changes."""

    harness: str
    placement: str
    tenant: str


def body_too_large(limit: int) -> ApiError:
    """413 for a body over ``max_body_bytes`` — one wording for HTTP and ``session.input`` (where
    the limit applies to the record value), so both entry points answer identically."""
    return errors.too_large(f"the request body exceeds the limit of {limit} bytes", None)


class ImageWorkers:
    """Validation of a body that carries images runs on a bounded pool of threads, off the
    event loop: the decodes (zlib's inflate, libjpeg) release the GIL, so ``/healthz`` and other
    tenants' requests are answered meanwhile; requests beyond the pool's threads wait their
    turn. Each thread decodes one image at a time within the request's ``DecodeBudget``, so a
    replica holds at most ``workers`` decodes in memory
    (services/admission/domain/validation/limits.py). A body without images is validated in the
    event loop (microseconds; a thread hop would cost more).

    The threads run at a lower CPU priority than the event loop (``DECODE_NICE``; on Linux a
    thread has its own nice value): on a replica's cores, a tenant's decodes take what the
    event loop leaves, rather than half of it — another tenant's GET waited on the decodes'
    CPU, not on the loop (docs/benchmarks.md, "The cases and how they are measured", case 6)."""

    def __init__(self, workers: int) -> None:
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="image-check",
                                       initializer=lower_priority)

    async def run(self, body: Any, check: Callable[..., T], *args: Any) -> T:
        if not carries_images(body):
            return check(*args)
        return await asyncio.get_running_loop().run_in_executor(self.pool, check, *args)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def carries_images(body: Any) -> bool:
    """Whether the parsed body has an ``image_url`` key anywhere (where the content walk finds
    image parts); an iterative walk, so no nesting depth can make it fail."""
    stack = [body]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if "image_url" in value:
                return True
            stack.extend(v for v in value.values() if isinstance(v, dict | list))
        elif isinstance(value, list):
            stack.extend(v for v in value if isinstance(v, dict | list))
    return False


def stored_form_too_large(record: Json, json_bytes: int, record_max: int | None = None
                          ) -> ApiError | None:
    """413 for an input whose stored form the store could not hold: every service that stores
    the admitted input keeps it whole in one document (storage's journal entry and Items, the
    dispatcher's queued input), as JSON text or as BSON, so the admitted record must fit in
    ``STORED_FORM_MAX_BYTES`` both ways. BSON is measured only when the JSON is over half of
    it: below that, the count limits bound BSON's per-element overhead well inside the room
    left (docs/admission.md, "How large an input may be"). ``record_max``: the largest
    ``session.admitted`` record the topics take, less room for the key and headers."""
    param = "output" if "submission" in record else "input"
    if record_max is not None and json_bytes > record_max:
        # a deployment with a small body limit has small topic records (2 × the body + 1 MiB);
        # an input whose parts expand when normalized could outgrow them
        return errors.too_large(
            f"the input is {json_bytes} bytes as a record; the topics take records of at most "
            f"{record_max} bytes", param)
    size = json_bytes
    if size * 2 > STORED_FORM_MAX_BYTES:
        size = max(size, len(bson.encode(record)))
    if size <= STORED_FORM_MAX_BYTES:
        return None
    return errors.too_large(
        f"the input is {size} bytes as stored; a stored input holds at most "
        f"{STORED_FORM_MAX_BYTES} bytes (the store's {STORE_DOCUMENT_BYTES}-byte document "
        "less room for the fields stored with it)", param)


class Admission:
    def __init__(
        self,
        settings: Settings,
        topics: Topics,
        producer: AIOKafkaProducer,
        db: AsyncDatabase[Doc],
        replies: ReplyTail,
        items: ItemTail,
        watches: Sequence[Watch],
        tracer: Tracer | None = None,
    ) -> None:
        self.settings = settings
        self.tracer = tracer  # the hand-over's ``send`` span (shared.tracing); None: off
        self.topics = topics
        # a plain producer (``shared.kafka.make_producer``): FastStream's per-publish wrapper
        # cost more than the send itself on the hand-over path (docs/admission.md)
        self.producer = producer
        self.db = db
        self.replies = replies
        self.items = items
        self.watches = watches  # the store and the broker: 503 before a hand-over
        self.limits = rules.Limits.from_settings(settings)
        self.images = ImageWorkers(IMAGE_DECODE_WORKERS)  # image decoding off the event loop
        self.record_max = max_record_bytes(settings) - RECORD_ROOM  # the topics' records
        # A Session's harness, placement and tenant never change and Sessions are never
        # deleted, so what admission read once stays true: one store read per Session, not per
        # event. Held as plain tuples of strings, which the cyclic collector stops tracking
        # (a ``Profile`` it tracks): its full pauses do not grow with the Sessions held
        # (docs/benchmarks.md, "Collector pauses").
        self.profiles: OrderedDict[str, tuple[str, str, str]] = OrderedDict()

    # ---- writes --------------------------------------------------------------------
    async def create_session(self, body: Any, *, tenant: str, checked: Any = None) -> Answer:
        """``checked``: ``validate_create``'s verdict on ``body`` if it was validated already
        (a large body, in the body parser's child: ``create_check``)."""
        with Stopwatch(ADMISSION_SECONDS.labels("create_session")):
            return await self._create_session(body, tenant, checked)

    def create_check(self) -> BodyCheck:
        """A large create body's validation, run in the body parser's child after its parse
        (services/admission/parsing.py): the same ``validate_create``, the same limits."""
        return BodyCheck(rules.validate_create, (self.limits,), self.images.pool)

    async def add_event(self, session_id: str, body: Any, *, tenant: str) -> Answer:
        with Stopwatch(ADMISSION_SECONDS.labels("add_event")):
            return await self._add_event(session_id, body, tenant)

    async def _create_session(self, body: Any, tenant: str, checked: Any) -> Answer:
        admitted = checked if checked is not None else await self.images.run(
            body, rules.validate_create, body, self.limits)
        if isinstance(admitted, ApiError):
            return Answer.error(admitted)
        fp = idempotency.request_fingerprint(body, "create")
        crid = admitted.client_request_id
        if crid:
            prior = unpack(await self.db.idempotency.find_one(
                {"_id": create_key(tenant, crid)}))
            if prior is not None:
                return await self._replayed(idempotency.repeat(prior, fp, "create"), None)
        return await self._hand_over(admitted.admitted_record(
            self._stamp(new_id("session"), fp, tenant)))

    async def _add_event(self, session_id: str, body: Any, tenant: str) -> Answer:
        profile = await self._owned(session_id, tenant)
        if isinstance(profile, ApiError):
            return Answer.error(profile)
        admitted = await self.images.run(body, rules.validate_event, body, profile.harness,
                                         profile.placement, self.limits)
        if isinstance(admitted, ApiError):
            return Answer.error(admitted)
        fp = idempotency.request_fingerprint(body, "event")
        ceid = admitted.client_event_id
        if ceid:
            prior = unpack(
                await self.db.idempotency.find_one({"_id": event_key(session_id, ceid)})
            )
            if prior is not None:
                return await self._replayed(idempotency.repeat(prior, fp, "event"), session_id)
        record = admitted.admitted_record(self._stamp(session_id, fp, tenant))
        if isinstance(admitted, rules.AdmittedToolResult):
            call = unpack(await self.db.calls.find_one(
                {"_id": call_key(session_id, admitted.call_id)}))
            if call is not None or not await self._issued(session_id, admitted.call_id):
                repeated = idempotency.result_repeat(call, record["submission_fingerprint"])
                if repeated is not None:
                    return await self._replayed(repeated, session_id)
        return await self._hand_over(record)

    async def _issued(self, session_id: str, call_id: str) -> bool:
        """The call is open in the Session's newest state although its call document is not
        there yet: its ``function_call`` Item is journaled (and may be on the topic, and in
        ``GET …/items``) while storage still writes the call behind it. Storage then decides
        the result itself (it writes a batch's calls before it decides the next batch)."""
        head = await self._session(session_id, {"last_sequence": 1, "open_calls": 1})
        return call_id in ((head or {}).get("open_calls") or {})

    @staticmethod
    def _stamp(session_id: str, fp: str, tenant: str) -> rules.Stamp:
        return rules.Stamp(request_id=new_id("req"), session_id=session_id,
                           event_id=new_id("evt"), admitted_at=now_rfc3339(), fingerprint=fp,
                           tenant=tenant)

    async def _owned(self, session_id: str, tenant: str) -> Profile | ApiError:
        """The one gate of every path that names a Session: a malformed id is 400; a Session
        that does not exist and one of another tenant are the same 404, so a tenant learns
        nothing of others' Sessions."""
        if not is_id(session_id, "session"):
            return errors.invalid("malformed session id", "session_id")
        profile = await self._session_profile(session_id)
        if profile is None or profile.tenant != tenant:
            return errors.not_found("no such Session", "session_id")
        return profile

    async def _session_profile(self, session_id: str) -> Profile | None:
        hit = self.profiles.get(session_id)
        if hit is not None:
            self.profiles.move_to_end(session_id)
            return Profile(*hit)
        doc = await self.db.sessions.find_one({"_id": session_id},
                                              {"harness": 1, "placement": 1, "tenant": 1})
        if doc is None:
            return None
        profile = Profile(doc["harness"], doc["placement"], doc.get("tenant") or DEFAULT_TENANT)
        self.profiles[session_id] = (profile.harness, profile.placement, profile.tenant)
        if len(self.profiles) > PROFILE_CACHE:
            self.profiles.popitem(last=False)
        return profile

    async def _replayed(self, repeated: idempotency.Replay | ApiError,
                        session_id: str | None) -> Answer:
        """A retry answered from the store, with the stored Items (``shared.domain.idempotency``
        decides the answer; storage decides the same when two retries crossed in flight)."""
        if isinstance(repeated, ApiError):
            return Answer.error(repeated)
        body = repeated.body
        body["items"] = await itemstore.items_by_keys(self.db, repeated.item_keys)
        headers = {"Idempotent-Replayed": "true"} if repeated.replayed else {}
        return Answer(repeated.status, body, headers, session_id=session_id or body.get("id"))

    async def _hand(self, record: Json, value: bytes) -> None:
        """Publish to storage (acks=all) and wait for the acknowledgement."""
        topic = self.topics.session_admitted
        await (await send_counted(self.producer, topic, value, record["session_id"].encode(),
                                  self.tracer))

    async def _hand_over(self, record: Json) -> Answer:
        """Publish to storage with acks=all, then wait for the stored answer. With the store
        or the broker unreachable nothing is published (``Watch.require`` raises; the HTTP layer
        answers 503, the ``session.input`` consumer retries the record). A timeout answers
        504 and loses nothing: the record is in Kafka and storage will store it; a retry with the
        same idempotency id returns the stored result."""
        rid = record["request_id"]
        value = encode(record)
        too_large = stored_form_too_large(record, len(value), self.record_max)
        if too_large is not None:
            return Answer.error(too_large)
        for watch in self.watches:  # the store or the broker is away: 503 now, nothing sent
            await watch.require()
        with bound(session_id=record["session_id"], request_id=rid):
            fut = self.replies.expect(rid)
            try:
                budget = self.settings.storage_reply_timeout_ms / 1000
                # bounded too: a broker lost after the watch's probe must not hold the request
                await asyncio.wait_for(self._hand(record, value), budget)
                reply = await asyncio.wait_for(fut, budget)
            except TimeoutError:
                log.warning("admission.storage_timeout")
                return Answer(504, {"error": {
                    "type": "timeout",
                    "message": "the input was admitted but storage did not answer in time; "
                    "retry with the same idempotency id to read the stored result",
                    "param": None}}, session_id=record["session_id"])
            finally:
                self.replies.forget(rid)
            log.info("admission.stored", status=reply["status"])
            return Answer(int(reply["status"]), reply["body"], session_id=record["session_id"])

    # ---- reads ---------------------------------------------------------------------
    async def catch_up(self, session_id: str, watch: TurnWatch) -> None:
        """Feed ``watch`` the Items already stored after what it knows (those published before
        a waiter attached to the Item tail), and tell it whether its Turn is still running."""
        doc = await self._session(session_id, {"last_sequence": 1, "turn_id": 1,
                                               "turn_running": 1})
        if doc is None:
            return
        watch.turn_ended_before(doc.get("turn_id"), bool(doc.get("turn_running")))
        last = int(doc.get("last_sequence", 0))
        after = watch.after
        while after < last:
            page = await itemstore.page(self.db, session_id, after, CATCH_UP_PAGE, last)
            for it in page:
                watch.offer(it)
            after = min(after + CATCH_UP_PAGE, last)

    async def items_after(self, session_id: str, after: int) -> list[Json]:
        """Every stored Item of the Session after ``sequence`` ``after``, in order (an SSE
        stream's catch-up: what was published before its listener attached)."""
        doc = await self._session(session_id, {"last_sequence": 1})
        last = int((doc or {}).get("last_sequence", 0))
        out: list[Json] = []
        while after < last:
            out += await itemstore.page(self.db, session_id, after, CATCH_UP_PAGE, last)
            after = min(after + CATCH_UP_PAGE, last)
        return out

    async def _session(self, session_id: str, fields: dict[str, int] | None = None
                       ) -> Json | None:
        """The Session document, brought up to what storage journaled after it (storage writes
        it behind its Items: ``itemstore.session_head``)."""
        doc = await self.db.sessions.find_one({"_id": session_id}, fields)
        return await itemstore.session_head(self.db, doc)

    async def get_session(self, session_id: str, *, tenant: str) -> Answer:
        owned = await self._owned(session_id, tenant)
        if isinstance(owned, ApiError):
            return Answer.error(owned)
        doc = unpack(await self._session(session_id))
        if doc is None:
            return Answer.error(errors.not_found("no such Session", "session_id"))
        body = {
            "id": doc["_id"],
            "harness": doc["harness"],
            "placement": doc["placement"],
            "status": doc.get("status"),
            "binding": doc.get("binding"),
            # the dispatcher's binding facts, as storage applied them to the Session
            "runtime_id": (doc.get("binding") or {}).get("runtime_id"),
            "turn": {"id": doc.get("turn_id"), "running": doc.get("turn_running", False)},
            "last_sequence": doc.get("last_sequence", 0),
            "created_at": doc.get("created_at"),
            "metadata": doc.get("metadata"),
        }
        return Answer(200, body)

    async def list_items(self, session_id: str, after: int, limit: int,
                         *, tenant: str) -> Answer:
        owned = await self._owned(session_id, tenant)
        if isinstance(owned, ApiError):
            return Answer.error(owned)
        session = await self._session(session_id, {"last_sequence": 1})
        if session is None:
            return Answer.error(errors.not_found("no such Session", "session_id"))
        last = int(session.get("last_sequence", 0))
        docs = await itemstore.page(self.db, session_id, after, limit, last)
        more = after + limit < last
        body = {
            "items": docs,
            "has_more": more,
            "next_after": docs[-1]["sequence"] if docs else after,
        }
        return Answer(200, body)

    async def stored_items(self, session_id: str, after: int, page_size: int = 500
                           ) -> AsyncIterator[Doc]:
        """Every stored Item of the Session after ``after`` (the caller checked ownership)."""
        while True:
            session = await self._session(session_id, {"last_sequence": 1})
            last = int(session.get("last_sequence", 0)) if session else 0
            if after >= last:
                return
            docs = await itemstore.page(self.db, session_id, after, page_size, last)
            if not docs:
                return
            for doc in docs:
                yield doc
            after = int(docs[-1]["sequence"])

    async def get_tool_result(self, session_id: str, call_id: str,
                              *, tenant: str) -> Answer:
        owned = await self._owned(session_id, tenant)
        if isinstance(owned, ApiError):
            return Answer.error(owned)
        call = unpack(await self.db.calls.find_one({"_id": call_key(session_id, call_id)}))
        if call is None:
            return Answer.error(errors.not_found("no such call in this Session", "call_id"))
        # the verdict, once the receipt tracker gave it; else "pending" since the submission
        app = (await itemstore.verdict(self.db, session_id, call_id)
               or call.get("application") or None)
        body = {
            "session_id": session_id,
            "call_id": call_id,
            "name": call.get("name"),
            "arguments": call.get("arguments"),
            "submitted": call.get("submission") is not None,
            "submission": call.get("submission"),
            "fields_present": call.get("fields_present"),
            "submitted_at": call.get("submitted_at"),
            "application": app,
            "state": (app or {}).get("state") or ("open" if call.get("submission") is None
                                                   else "pending"),
        }
        return Answer(200, body)
