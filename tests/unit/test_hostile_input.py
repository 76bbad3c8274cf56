"""Hostile input never crashes the parsers and never becomes a command argument unvalidated.

Job comments, names, log lines and node names are untrusted: shell metacharacters, quotes, newlines,
very long lines and invalid UTF-8 must come out as a value, None, or one documented error type.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainguard.detection.analyzer import LogAnalyzer
from trainguard.models import Mode, OptIn
from trainguard.optin import MAX_COMMENT_CHARS, MalformedComment, parse_opt_in
from trainguard.slurm import commands

SHELLISH = st.sampled_from(
    [
        "$(reboot)",
        "`id`",
        "; rm -rf /",
        "| nc 1 2",
        "&&",
        "'",
        '"',
        "\\",
        "\n",
        "\r",
        "\x00",
        "${IFS}",
        "*",
        "~",
    ]
)
HOSTILE_TEXT = st.lists(st.one_of(st.text(max_size=40), SHELLISH), max_size=12).map("".join)
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | HOSTILE_TEXT,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(HOSTILE_TEXT, kids, max_size=4),
    max_leaves=12,
)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _outcome(comment: str | None) -> OptIn | MalformedComment | None:
    try:
        return parse_opt_in(comment)
    except MalformedComment as err:
        return err


@SETTINGS
@given(st.one_of(st.none(), st.text(max_size=400), HOSTILE_TEXT))
def test_any_comment_is_an_opt_in_none_or_malformed(comment: str | None) -> None:
    result = _outcome(comment)
    assert result is None or isinstance(result, OptIn | MalformedComment)
    if isinstance(result, MalformedComment):
        assert 0 < len(str(result)) <= 600  # error text is bounded before it enters an audit row


@SETTINGS
@given(body=JSONISH, key=st.sampled_from(["trainguard", "nvidia-recovery"]), quoted=st.booleans())
def test_any_json_under_the_opt_in_key_is_an_opt_in_or_malformed(
    body: object, key: str, quoted: bool
) -> None:
    text = json.dumps({key: body})
    result = _outcome(f"'{text}'" if quoted else text)
    assert isinstance(result, OptIn | MalformedComment)
    if isinstance(result, OptIn):
        assert result.mode in (Mode.OBSERVE, Mode.ACTION)
        assert isinstance(result.environment, str)


@SETTINGS
@given(environment=HOSTILE_TEXT, mode=st.sampled_from(["observe", "action"]))
def test_hostile_environment_names_round_trip_as_data(environment: str, mode: str) -> None:
    comment = json.dumps({"trainguard": {"environment": environment, "mode": mode}})
    printable = 0 < len(environment) <= 200 and not any(ord(c) < 32 or ord(c) == 127 for c in environment)
    if printable:
        assert parse_opt_in(comment) == OptIn(environment=environment, mode=Mode(mode))
    else:  # control characters or an empty/huge name: reported, never silently ignored
        try:
            parse_opt_in(comment)
        except MalformedComment as err:
            assert "environment" in str(err)
        else:
            raise AssertionError("an unprintable environment name must be reported as malformed")


@SETTINGS
@given(st.binary(max_size=400))
def test_invalid_utf8_comment_decoded_by_slurm_replacement_never_crashes(raw: bytes) -> None:
    # the worker reads Slurm's output with errors="replace"; the parser sees whatever that yields
    alone = _outcome(raw.decode("utf-8", errors="replace"))
    assert alone is None or isinstance(alone, OptIn | MalformedComment)
    result = _outcome(raw.decode("utf-8", errors="replace") + '{"trainguard":{}}')
    assert result is None or isinstance(result, OptIn | MalformedComment)


def test_oversized_and_deeply_nested_comments_are_malformed_not_crashes() -> None:
    with pytest.raises(MalformedComment):
        parse_opt_in('{"trainguard":{"environment":"' + "x" * MAX_COMMENT_CHARS + '"}}')
    with pytest.raises(MalformedComment):
        parse_opt_in("trainguard" + "[" * 100_000)
    with pytest.raises(MalformedComment):
        parse_opt_in('{"trainguard": {"mode": "action; scancel -u root"}}')


@SETTINGS
@given(chunks=st.lists(st.binary(max_size=2000), max_size=8), long_line=st.integers(0, 300_000))
def test_log_analyzer_survives_arbitrary_bytes_and_huge_lines(chunks: list[bytes], long_line: int) -> None:
    analyzer = LogAnalyzer()
    offset = 0
    feed = [*chunks, b"A" * long_line + b"\xff\xfe NCCL WARN $(reboot) `id`\n"]
    for chunk in feed:
        findings = analyzer.feed(chunk, now=1000.0, base_offset=offset)
        offset += len(chunk)
        for finding in findings:
            assert len(finding.line) <= 2000  # evidence is clipped before it enters workflow history
            for node in finding.nodes:
                commands.node_name(node)  # any node a finding names is a valid Slurm identifier


@SETTINGS
@given(HOSTILE_TEXT)
def test_untrusted_ids_and_node_names_never_become_arguments(value: str) -> None:
    for build in (commands.scontrol_requeuehold, commands.scontrol_release, commands.scancel):
        try:
            argv = build(value)
        except ValueError:
            continue
        assert argv[-1].isdigit() or "_" in argv[-1]
    try:
        argv = commands.scontrol_set_excluded("7", [value])
    except ValueError:
        return
    assert (
        argv[-1] == f"ExcNodeList={value}"
        and value.replace("-", "").replace(".", "").replace("_", "").isalnum()
    )


@SETTINGS
@given(HOSTILE_TEXT)
def test_drain_reason_is_one_printable_argument(reason: str) -> None:
    try:
        argv = commands.scontrol_drain("node1", reason)
    except ValueError:
        return
    assert len(argv) == 5 and argv[-1].startswith("Reason=")
    text = argv[-1].removeprefix("Reason=")
    assert text.isprintable() and "=" not in text and "\n" not in text and len(text) <= commands.MAX_REASON
