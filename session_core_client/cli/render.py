"""Readable one-line renderings of public Items, Sessions and calls for the user CLI."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

MAX_TEXT = 80


def _short(text: str, limit: int = MAX_TEXT) -> str:
    shown = json.dumps(text, ensure_ascii=False)
    return shown if len(shown) <= limit else shown[: limit - 2] + "…\""


def image_label(url: object) -> str:
    """``[image/png 1.2 KB]`` for an inline data URI (size of the decoded bytes), else the
    reference's scheme."""
    if isinstance(url, str) and url.startswith("data:"):
        header, _, data = url[5:].partition(",")
        size = len(data) * 3 // 4 - data[-2:].count("=")
        return f"[{header.split(';')[0]} {_size(size)}]"
    if isinstance(url, str):
        return f"[image {url[:40]}]"
    return "[image]"


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n / 1024 / 1024:.1f} MB"


def content(parts: object, limit: int | None = MAX_TEXT) -> str:
    """Parts shown in a line: texts JSON-quoted (every space and line break visible), each cut
    at ``limit`` characters (``None``: whole), images as labels."""
    if isinstance(parts, str):
        return _short(parts, limit) if limit else json.dumps(parts, ensure_ascii=False)
    if not isinstance(parts, list):
        return json.dumps(parts)
    shown = []
    for p in parts:
        if isinstance(p, Mapping) and p.get("type") in ("input_text", "output_text"):
            text = str(p.get("text"))
            shown.append(_short(text, limit) if limit else json.dumps(text, ensure_ascii=False))
        elif isinstance(p, Mapping) and p.get("type") == "input_image":
            shown.append(image_label(p.get("image_url")))
        else:
            shown.append(json.dumps(p, ensure_ascii=False)[:MAX_TEXT])
    return " ".join(shown) if shown else "[]"


def item_line(item: Mapping[str, Any]) -> str:
    """One Item → one line: ``#<sequence> <type> <what it says>``."""
    seq = item.get("sequence", "?")
    kind = str(item.get("type"))
    if kind == "message" and item.get("role") == "agent":
        # the Turn's answer whole and marked; what the agent said on the way, cut short
        final = item.get("phase") == "final_answer"
        label = "agent (final answer)" if final else "agent"
        body = f"{label}: {content(item.get('content'), None if final else MAX_TEXT)}"
    elif kind == "message":
        body = f"{item.get('role', 'user')}: {content(item.get('content'))}"
    elif kind == "turn":
        body = f"{item.get('turn_id')} {str(item.get('state')).upper()}"
        if item.get("reason"):
            body += f" — {item['reason']}"
        usage = item.get("usage")
        if isinstance(usage, Mapping):
            body += (f" (tokens: {usage.get('input_tokens')} in, "
                     f"{usage.get('cached_input_tokens')} cached, "
                     f"{usage.get('output_tokens')} out)")
    elif kind == "function_call":
        args = json.dumps(item.get("arguments"), ensure_ascii=False)
        body = f"{item.get('name')}({args[:MAX_TEXT]}) call_id={item.get('call_id')}"
    elif kind == "function_call_output":
        out = item.get("output")
        body = (
            f"call_id={item.get('call_id')} "
            f"{'success' if item.get('success') else 'FAILURE'} "
            f"output={'null' if out is None else content(out)} "
            f"error={'null' if item.get('error') is None else _short(str(item['error']))}"
        )
    elif kind == "function_call_application":
        body = f"call_id={item.get('call_id')} {str(item.get('state')).upper()}"
        if item.get("reason"):
            body += f" — {item['reason']}"
    else:
        extra = {k: v for k, v in item.items()
                 if k not in ("id", "session_id", "sequence", "type", "created_at", "schema")}
        body = json.dumps(extra, ensure_ascii=False)[:120]
    when = str(item.get("created_at", ""))[11:23]
    return f"#{seq:<4} {when:<12} {kind:<26} {body}{envelope_suffix(item)}"


def envelope_suffix(item: Mapping[str, Any]) -> str:
    """`` from slack:U1 (Alice) #tag meta={…}`` for an Item that echoes the input's envelope."""
    out = ""
    actor = item.get("external_actor")
    if isinstance(actor, Mapping):
        out += f" from {actor.get('source')}:{actor.get('actor_id')}"
        if actor.get("actor_name"):
            out += f" ({actor['actor_name']})"
    tags = item.get("tags")
    if isinstance(tags, list) and tags:
        out += " " + " ".join(f"#{t}" for t in tags)
    if item.get("metadata") is not None:
        out += " meta=" + json.dumps(item["metadata"], ensure_ascii=False)[:MAX_TEXT]
    return out


def session_lines(session: Mapping[str, Any]) -> list[str]:
    lines = [f"Session {session.get('id')}"]
    for key in ("harness", "placement", "status", "binding", "runtime_id", "created_at",
                "metadata"):
        if key in session and session[key] is not None:
            value = session[key]
            shown = json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) \
                else str(value)
            lines.append(f"  {key:<10} {shown}")
    for key, value in session.items():
        if key not in ("id", "harness", "placement", "status", "binding", "runtime_id",
                       "created_at", "metadata", "items"):
            lines.append(f"  {key:<10} {json.dumps(value, ensure_ascii=False)[:120]}")
    return lines


def call_lines(call: Mapping[str, Any]) -> list[str]:
    lines = [f"Call {call.get('call_id')}"]
    for key, value in call.items():
        if key == "call_id":
            continue
        if isinstance(value, Mapping) and key in ("submission", "application"):
            lines.append(f"  {key}:")
            for k, v in value.items():
                shown = content(v) if k == "output" else json.dumps(v, ensure_ascii=False)
                lines.append(f"    {k:<14} {shown[:160]}")
        else:
            shown = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) \
                else value
            lines.append(f"  {key:<16} {shown[:160]}")
    return lines


def error_line(status: int, body: object) -> str:
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        err = body["error"]
        line = f"error {status} {err.get('type')}: {err.get('message')}"
        if err.get("param"):
            line += f" (param: {err['param']})"
        return line
    return f"error {status}: {json.dumps(body)[:200] if body is not None else ''}"
