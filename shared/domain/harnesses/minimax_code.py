"""MiniMax Code: a text-only harness. Image parts are refused with a terminal
``UnsupportedContent`` error — never dropped — and a terminal error is never retried.

Native encoding: one native user prompt string per public message, its text parts concatenated
in order. MiniMax Code has no public functions, so a function result is refused the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shared.domain.errors import join_path
from shared.domain.harnesses.claude_code import result_end
from shared.domain.harnesses.errors import AdapterError, UnsupportedContent, is_terminal
from shared.domain.harnesses.facts import Fact

HARNESS = "minimax_code"

__all__ = ["HARNESS", "classify_all", "encode_function_result", "encode_messages", "is_terminal"]


def encode_messages(messages: Sequence[Mapping[str, Any]]) -> list[str] | AdapterError:
    prompts: list[str] = []
    for i, message in enumerate(messages):
        texts: list[str] = []
        for j, part in enumerate(message["content"]):
            where = join_path(join_path(join_path("messages", i), "content"), j)
            kind = part.get("type")
            if kind == "input_text":
                texts.append(part["text"])
            elif kind == "input_image":
                return UnsupportedContent(
                    message=f"{HARNESS} is text-only and cannot take image parts", param=where
                )
            else:
                return UnsupportedContent(
                    message=f"unknown content part type {kind!r}", param=where
                )
        prompts.append("".join(texts))
    return prompts


def encode_function_result(
    call_id: str, success: bool, content: Sequence[Mapping[str, Any]]
) -> AdapterError:
    return UnsupportedContent(message=f"{HARNESS} has no public functions", param="call_id")


def classify_all(native: Mapping[str, Any]) -> list[Fact]:
    """MiniMax Code's bridge reports Turn ends as Claude Code does (a ``result`` record); it
    makes no public calls."""
    return result_end(native)
