"""Parse a job's --comment opt-in. The comment is untrusted user text."""

from __future__ import annotations

import json

from pydantic import ValidationError

from trainguard.models import OptIn

OPT_IN_KEYS = ("trainguard", "nvidia-recovery")
MAX_COMMENT_CHARS = 64_000


class MalformedComment(ValueError):
    """The comment names TrainGuard but cannot be understood; the job is reported and ignored."""


def parse_opt_in(comment: str | None) -> OptIn | None:
    """Return the opt-in, None when the job did not opt in, or raise MalformedComment."""
    if not comment:
        return None
    text = comment.strip()
    if not any(key in text for key in OPT_IN_KEYS):
        return None
    if len(text) > MAX_COMMENT_CHARS:
        raise MalformedComment(f"comment is {len(text)} characters long (limit {MAX_COMMENT_CHARS})")
    # Slurm keeps the comment as given; sbatch scripts often wrap it in single quotes.
    if len(text) >= 2 and text[0] == text[-1] == "'":
        text = text[1:-1]
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:
        raise MalformedComment(f"comment mentions TrainGuard but is not valid JSON: {err}") from None
    if not isinstance(doc, dict):
        raise MalformedComment("comment mentions TrainGuard but is not a JSON object")
    present = [key for key in OPT_IN_KEYS if key in doc]
    if not present:
        return None
    if len(present) > 1:
        raise MalformedComment(f"comment carries both {present[0]!r} and {present[1]!r}; use one")
    body = doc[present[0]]
    if body is None or body == {}:
        return OptIn()
    if not isinstance(body, dict):
        raise MalformedComment(f"{present[0]!r} must be a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - set(OptIn.model_fields))
    if unknown:
        raise MalformedComment(f"unknown key(s) in {present[0]!r}: {', '.join(map(str, unknown))[:200]}")
    try:
        return OptIn.model_validate(body)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise MalformedComment(f"invalid {present[0]!r} settings: {problems}"[:500]) from None
