"""The --comment opt-in parser: what opts in, what is ignored, what is reported as malformed."""

from __future__ import annotations

import pytest

from trainguard.models import Mode
from trainguard.optin import MalformedComment, parse_opt_in


@pytest.mark.parametrize(
    ("comment", "environment", "mode"),
    [
        ('{"trainguard":{"environment":"prod","mode":"observe"}}', "prod", Mode.OBSERVE),
        ('{"trainguard":{"environment":"prod","mode":"action"}}', "prod", Mode.ACTION),
        ('{"nvidia-recovery":{"environment":"x","mode":"action"}}', "x", Mode.ACTION),
        ('\'{"trainguard":{"mode":"action"}}\'', "default", Mode.ACTION),  # sbatch-script quoting kept
        ('{"trainguard":{}}', "default", Mode.OBSERVE),
        ('{"trainguard":null, "owner":"ml"}', "default", Mode.OBSERVE),
        ('  {"trainguard":{"environment":"e"}}  ', "e", Mode.OBSERVE),
    ],
)
def test_opted_in(comment: str, environment: str, mode: Mode) -> None:
    opt = parse_opt_in(comment)
    assert opt is not None
    assert (opt.environment, opt.mode) == (environment, mode)


@pytest.mark.parametrize("comment", [None, "", "nightly run", '{"owner":"ml"}', "[1,2]", "trainingguard"])
def test_not_opted_in(comment: str | None) -> None:
    assert parse_opt_in(comment) is None


@pytest.mark.parametrize(
    ("comment", "needle"),
    [
        ('{"trainguard":{"mode":"yolo"}}', "mode"),
        ('{"trainguard":{"mode":"action"', "not valid JSON"),
        ('{"trainguard":"action"}', "must be a JSON object"),
        ('{"trainguard":{"mdoe":"action"}}', "unknown key"),
        ('{"trainguard":{},"nvidia-recovery":{}}', "use one"),
        ('["trainguard"]', "not a JSON object"),
        ('{"trainguard":{"environment":"prod\\nrm -rf /"}}', "control characters"),
        ('{"trainguard":{"environment":""}}', "environment"),
    ],
)
def test_malformed_comments_say_what_is_wrong(comment: str, needle: str) -> None:
    with pytest.raises(MalformedComment) as err:
        parse_opt_in(comment)
    assert needle in str(err.value)


def test_huge_comment_is_rejected_without_parsing() -> None:
    with pytest.raises(MalformedComment, match="characters long"):
        parse_opt_in('{"trainguard":{"environment":"' + "x" * 70_000 + '"}}')


def test_deeply_nested_json_is_malformed_not_a_crash() -> None:
    with pytest.raises(MalformedComment):
        parse_opt_in('{"trainguard":' + "[" * 100_000 + "]" * 100_000 + "}")
