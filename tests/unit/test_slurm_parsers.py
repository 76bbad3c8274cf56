"""Parsers against output captured from the real local cluster (tests/fixtures/slurm/)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainguard.models import JobSnapshot
from trainguard.slurm.parsers import (
    AmbiguousOutputError,
    SlurmParseError,
    SlurmReportedError,
    expand_output_path,
    parse_scontrol_job,
    parse_scontrol_jobs,
    parse_scontrol_nodes,
    parse_sinfo_json,
    parse_squeue_json,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
OPT_IN = '{"trainguard":{"environment":"prod","mode":"observe"}}'


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def by_id(name: str) -> dict[str, JobSnapshot]:
    return {job.job_id: job for job in parse_squeue_json(fixture(name))}


def test_squeue_running_two_node_job() -> None:
    job = by_id("squeue_mixed.json")["1"]
    assert job.state == "RUNNING"
    assert job.nodes == ("node1", "node2")
    assert job.num_nodes == 2
    assert job.comment == OPT_IN
    assert job.name == 'train %x "quoted" $HOME'
    # squeue --json leaves %x-%j unexpanded; the parser expands once, like scontrol does.
    assert job.stdout_path == '/tmp/tg-h1/jobs/train %x "quoted" $HOME-1.out'
    assert job.stderr_path == job.stdout_path
    assert job.held is False and job.exit_code is None
    assert job.submit_time == 1795943369 and job.start_time == 1795943370
    assert job.end_time == 0  # projected end of a running job is not an end
    assert job.user == "root" and job.partition == "debug"


def test_squeue_states_exit_codes_and_hold() -> None:
    jobs = parse_squeue_json(fixture("squeue_mixed.json"))
    states = {j.job_id: (j.state, j.reason, j.held, j.exit_code) for j in jobs}
    assert states["2"] == ("PENDING", "JobHeldUser", True, None)
    assert states["3"] == ("FAILED", "NonZeroExitCode", False, 3)
    assert states["4"] == ("COMPLETED", "None", False, 0)
    held = next(j for j in jobs if j.job_id == "2")
    assert held.comment == "plain comment; rm -rf /"
    assert held.stdout_path == "/tmp/tg-h1/jobs/slurm-2.out"  # Slurm's default when -o is absent


def test_squeue_requeued_with_exclusions() -> None:
    job = by_id("squeue_requeued.json")["1"]
    assert (job.state, job.held, job.restart_count) == ("PENDING", True, 1)
    assert job.excluded_nodes == ("node2",)
    running_held = by_id("squeue_requeued.json")["2"]
    assert running_held.state == "RUNNING" and running_held.held


def test_squeue_node_fail_and_automatic_requeue() -> None:
    jobs = by_id("squeue_node_fail.json")
    failed = jobs["8"]
    assert (failed.state, failed.reason, failed.requeue_allowed) == ("NODE_FAIL", "NodeDown", False)
    assert failed.nodes == ("node4",)
    requeued = jobs["9"]  # requeueable job on the same node: Slurm requeued it itself
    assert (requeued.state, requeued.restart_count, requeued.held) == ("PENDING", 1, False)


def test_squeue_array_tasks_and_pending_remainder() -> None:
    jobs = parse_squeue_json(fixture("squeue_array_drain.json"))
    tasks = {(j.array_job_id, j.array_task_id): j for j in jobs if j.name == "sweep"}
    assert tasks[("11", "1")].job_id == "12"
    assert tasks[("11", "1")].stdout_path == "/tmp/tg-h1/jobs/sweep-11_1.out"
    remainder = tasks[("11", "0,2-7%2")]
    assert remainder.job_id == "11" and remainder.held
    plain = by_id("squeue_mixed.json")
    assert plain["6"].array_job_id == "5" and plain["6"].array_task_id == "0"
    assert plain["1"].array_job_id is None


def test_squeue_completing_after_requeuehold() -> None:
    job = by_id("squeue_completing.json")["10"]
    assert (job.state, job.held, job.restart_count) == ("COMPLETING", True, 1)


def test_sinfo_states() -> None:
    nodes = {n.name: n for n in parse_sinfo_json(fixture("sinfo_node_down.json"))}
    assert nodes["node4"].state == "down" and "NOT_RESPONDING" in nodes["node4"].flags
    assert nodes["node1"].state == "idle"
    drained = {n.name: n for n in parse_sinfo_json(fixture("sinfo_drain.json"))}["node3"]
    assert drained.state == "drained" and drained.reason == 'disk sick; "quoted" [x]'
    assert [n.state for n in parse_sinfo_json(fixture("sinfo_mixed.json"))][:2] == ["mixed", "mixed"]


def test_scontrol_nodes_match_sinfo() -> None:
    for text, json_name in [
        ("scontrol_nodes_down.txt", "sinfo_node_down.json"),
        ("scontrol_nodes_drain.txt", "sinfo_drain.json"),
    ]:
        assert parse_scontrol_nodes(fixture(text)) == parse_sinfo_json(fixture(json_name))


def test_scontrol_job_expanded_paths_and_comment() -> None:
    job = parse_scontrol_job(fixture("scontrol_job_1.txt"))
    assert job.job_id == "1" and job.state == "RUNNING"
    assert job.name == 'train %x "quoted" $HOME'
    assert job.comment == OPT_IN
    assert job.stdout_path == '/tmp/tg-h1/jobs/train %x "quoted" $HOME-1.out'
    assert job.nodes == ("node1", "node2") and job.num_nodes == 2


def test_scontrol_and_squeue_agree() -> None:
    fields = (
        "job_id",
        "name",
        "state",
        "comment",
        "nodes",
        "excluded_nodes",
        "restart_count",
        "submit_time",
        "held",
        "requeue_allowed",
        "stdout_path",
        "work_dir",
        "num_nodes",
        "num_tasks",
    )
    from_json = by_id("squeue_requeued.json")["1"]
    from_text = parse_scontrol_job(fixture("scontrol_job_requeued_held_excluded_epoch.txt"))
    for name in fields:
        assert getattr(from_text, name) == getattr(from_json, name), name


def test_scontrol_epoch_and_local_times_agree() -> None:
    epoch = parse_scontrol_job(fixture("scontrol_job_node_fail_epoch.txt"))
    local = parse_scontrol_job(fixture("scontrol_job_node_fail.txt"))
    assert epoch.submit_time == 1795943483
    assert epoch.state == "NODE_FAIL" and epoch.exit_code == 0 and epoch.end_time > epoch.start_time
    # Local-time text is interpreted in this host's zone; equal only where capture and test share it.
    assert abs(local.submit_time - epoch.submit_time) % 900 == 0


def test_scontrol_failed_exit_code_and_array_selection() -> None:
    failed = parse_scontrol_job(fixture("scontrol_job_3.txt"))
    assert (failed.state, failed.exit_code, failed.exit_signal) == ("FAILED", 3, 0)
    text = fixture("scontrol_job_array_5.txt")
    assert len(parse_scontrol_jobs(text)) == 3
    assert parse_scontrol_job(text, "5_1").job_id == "7"
    assert parse_scontrol_job(text, "5").array_task_id == "2"
    with pytest.raises(SlurmParseError):
        parse_scontrol_job(text)  # three records, none chosen
    with pytest.raises(SlurmParseError):
        parse_scontrol_job(text, "99")


def test_scontrol_hostile_name_imitating_fields_is_ambiguous() -> None:
    line = fixture("scontrol_job_1.txt").replace(
        'JobName=train %x "quoted" $HOME', "JobName=x JobState=COMPLETED Restarts=9"
    )
    with pytest.raises(AmbiguousOutputError):
        parse_scontrol_job(line)


def test_expand_output_path_single_pass_and_padding() -> None:
    path = expand_output_path(
        "out/%x-%4j-%A_%a-%%-%u.log",
        job_id="42",
        name="n%j",
        user="bob",
        work_dir="/w",
        array_job_id="40",
        array_task_id="2",
    )
    assert path == "/w/out/n%j-0042-40_2-%-bob.log"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "null",
        "[]",
        "{}",
        '{"jobs": 5}',
        '{"jobs": [1]}',
        '{"jobs": [{"job_id": "x"}]}',
        '{"jobs": [{"job_id": 1, "nodes": "n[1-"}]}',
        '{"jobs": [{"job_id": 1, "restart_cnt": true}]}',
        '{"errors": [{"error": "Unable to contact"}]}',
        "[" * 100000,
    ],
)
def test_squeue_malformed(text: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_squeue_json(text)


@pytest.mark.parametrize("text", ["", "garbage", "JobId=abc JobName=x", "NodeName=", "x=1 JobId=1"])
def test_scontrol_malformed(text: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_scontrol_jobs(text)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
job_keys = st.sampled_from(
    [
        "job_id",
        "name",
        "job_state",
        "nodes",
        "excluded_nodes",
        "restart_cnt",
        "priority",
        "exit_code",
        "array_job_id",
        "array_task_id",
        "array_task_string",
        "standard_output",
        "requeue",
        "submit_time",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(job_keys, json_values, max_size=8))
def test_squeue_arbitrary_job_fields_only_raise_parse_error(job: dict[str, object]) -> None:
    with contextlib.suppress(SlurmParseError):
        parse_squeue_json(json.dumps({"jobs": [job]}))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_only_raises_parse_error(text: str) -> None:
    for parse in (parse_squeue_json, parse_sinfo_json, parse_scontrol_jobs, parse_scontrol_nodes):
        with contextlib.suppress(SlurmParseError):
            parse(text)


@settings(max_examples=200, deadline=None)
@given(name=st.text(max_size=80), comment=st.text(max_size=200))
def test_hostile_name_and_comment_survive_json_round_trip(name: str, comment: str) -> None:
    doc = json.loads(fixture("squeue_mixed.json"))
    doc["jobs"][0]["name"] = name
    doc["jobs"][0]["comment"] = comment
    job = parse_squeue_json(json.dumps(doc))[0]
    assert (job.name, job.comment) == (name, comment)
    assert job.state == "RUNNING" and job.nodes == ("node1", "node2")


printable_no_newline = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=80)


@settings(max_examples=200, deadline=None)
@given(name=printable_no_newline, comment=printable_no_newline)
def test_hostile_scontrol_text_parses_right_or_is_flagged(name: str, comment: str) -> None:
    line = fixture("scontrol_job_1.txt").replace('JobName=train %x "quoted" $HOME', f"JobName={name}", 1)
    line = line.replace(f"Comment={OPT_IN}", f"Comment={comment}", 1)
    try:
        job = parse_scontrol_job(line)
    except AmbiguousOutputError:
        return
    except SlurmParseError:
        return
    # Either flagged above, or the scheduler-controlled fields are untouched.
    assert (job.job_id, job.state, job.restart_count, job.nodes) == ("1", "RUNNING", 0, ("node1", "node2"))


@pytest.mark.parametrize(
    ("name", "parse"),
    [("squeue_unreachable.json", parse_squeue_json), ("sinfo_unreachable.json", parse_sinfo_json)],
)
def test_unreachable_controller_output_is_an_error_not_an_empty_cluster(name: str, parse: object) -> None:
    # Real output with slurmctld down: exit status 0, an empty list and an `errors` entry.
    with pytest.raises(SlurmReportedError):
        parse(fixture(name))  # type: ignore[operator]


def test_task_counts_for_mapping_ranks_to_nodes() -> None:
    job = by_id("squeue_mixed.json")["1"]
    assert job.num_tasks == 2  # squeue's "tasks"
    assert parse_scontrol_job(fixture("scontrol_job_1.txt")).num_tasks == 2  # scontrol's NumTasks
    doc = json.loads(fixture("squeue_mixed.json"))
    for raw, want in (({"set": True, "number": 4}, 4), ({"set": False, "number": 0}, 0), (None, 0), ("x", 0)):
        doc["jobs"][0]["tasks"] = raw
        assert parse_squeue_json(json.dumps(doc))[0].num_tasks == want


def test_task_counts_of_slurm_24_11() -> None:
    from trainguard.slurm.formats import parse_jobs

    doc = json.loads((FIXTURES / "24.11" / "squeue_all.json").read_text())
    by_job = {j.job_id: j for j in parse_jobs(doc)}
    assert by_job["4"].num_nodes == 2 and by_job["4"].num_tasks == 2  # {"set": true, "number": 2}
