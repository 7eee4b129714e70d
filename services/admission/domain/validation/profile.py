"""Step 3 of admission: the harness profile. The body's shape and its images are known good;
what is left is whether the Session's harness can run it, read from the profile rows of
``shared.domain.harness`` — 400 ``unsupported_or_invalid_configuration`` when it cannot.

In this order: the placement, Claude Code's bound on messages per batch, then message by message
in document order its images and whitespace-only text; for a function result, the harness's
public functions, then part by part the output's text and images.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from shared.domain.errors import ApiError, unsupported
from shared.domain.harness import HarnessProfile
from shared.domain.whitespace import has_non_whitespace


def _for_session(
    harness: str, placement: str, profiles: Mapping[str, HarnessProfile]
) -> HarnessProfile | ApiError:
    profile = profiles.get(harness)
    if profile is None:  # the Session's own harness: a server-side inconsistency
        return ApiError("internal_error", f"the Session's harness {harness!r} is unknown", None)
    if placement not in profile.placements:
        return unsupported(f"{profile.title} does not run on placement {placement!r}", "placement")
    return profile


def check_messages(
    profiles: Mapping[str, HarnessProfile],
    harness: str,
    placement: str,
    messages: list[dict[str, Any]],
    first_image_part: Mapping[int, str],
    whitespace_candidates: Collection[int],
) -> ApiError | None:
    """``first_image_part``: message index → path of its first image part; the other messages
    (``whitespace_candidates``) have at least one non-empty text part."""
    profile = _for_session(harness, placement, profiles)
    if isinstance(profile, ApiError):
        return profile
    bound = profile.max_user_messages_per_batch
    if bound is not None and len(messages) > bound:
        return unsupported(
            f"{profile.title} accepts at most {bound} user messages in one native Turn",
            f"input[{bound}]",
        )
    images_ok = profile.images_allowed(placement)
    check_whitespace = profile.whitespace_only == "reject"
    if (images_ok or not first_image_part) and (not check_whitespace or not whitespace_candidates):
        return None
    candidates = set(whitespace_candidates)
    for i, m in enumerate(messages):
        part_param = first_image_part.get(i)
        if part_param is not None:
            if not images_ok:
                return unsupported(
                    f"{profile.title} does not accept images"
                    + ("" if profile.text_only else f" on placement {placement!r}"),
                    part_param,
                )
        elif (
            i in candidates
            and check_whitespace
            and not any(has_non_whitespace(p["text"]) for p in m["content"])
        ):
            return unsupported(
                f"{profile.title} cannot run a message with no image and no non-whitespace text",
                f"input[{i}].content",
            )
    return None


def check_result(
    profiles: Mapping[str, HarnessProfile],
    harness: str,
    placement: str,
    success: bool,
    output: str | list[dict[str, Any]] | None,
) -> ApiError | None:
    profile = _for_session(harness, placement, profiles)
    if isinstance(profile, ApiError):
        return profile
    rules = profile.function_results
    if not rules.public_functions:
        return unsupported(f"{profile.title} has no public functions", "type")
    if output is None:
        return None
    if isinstance(output, str):
        parts: list[dict[str, Any]] = [{"type": "input_text", "text": output}]
    else:
        parts = output
    images_ok = rules.images_in_success if success else rules.images_in_failure
    for j, part in enumerate(parts):
        if part["type"] == "input_text":
            if not rules.text_output:
                return unsupported(
                    f"{profile.title} takes no text in a function result", _output_param(output, j)
                )
        elif not images_ok:
            when = "a successful" if success else "a failed"
            return unsupported(
                f"{profile.title} takes no image in {when} function result",
                _output_param(output, j),
            )
        else:
            fmt = "png" if part["image_url"].startswith("data:image/png;") else "jpeg"
            if fmt not in rules.image_formats:
                return unsupported(
                    f"{profile.title} takes no {fmt.upper()} image in a function result",
                    _output_param(output, j),
                )
    return None


def _output_param(output: str | list[dict[str, Any]], part: int) -> str:
    return "output" if isinstance(output, str) else f"output[{part}]"
