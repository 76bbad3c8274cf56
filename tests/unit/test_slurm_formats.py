"""The version-tolerant format layer against real captures of Slurm 22.05 and 24.11.

Every JSON capture under tests/fixtures/slurm/ is parsed (the top level and 22.05/ are Slurm 22.05,
openapi v0.0.38; 24.11/ is Slurm 24.11.5, data_parser v0.0.42; captured by
scripts/capture_slurm_formats.py and by the slurm-lab tooling). Where a capture has `scontrol show job -o`
text of the same moment, JSON and text must say the same thing about each job: scontrol is how Slurm
itself reports a job. Slurm 25.x (data_parser v0.0.43) cannot be installed here: its documents are built
from real 24.11 captures changed as the published OpenAPI schema for v0.0.43 says (SchedMD/slurm
testsuite/python/data/openapi_specs/openapi_spec_v43.json: same job/node fields, plus
`stdout_expanded`/`stderr_expanded`, meta.plugin.data_parser "data_parser/v0.0.43").
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from trainguard.slurm import states
from trainguard.slurm.errors import SlurmFormatError, SlurmParseError, SlurmReportedError
from trainguard.slurm.formats import detect_format, parse_jobs, parse_nodes
from trainguard.slurm.parsers import parse_scontrol_jobs, parse_scontrol_nodes, parse_sinfo_json

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
OPT_IN = '{"trainguard":{"environment":"prod","mode":"observe"}}'


def version_of(path: Path) -> str:
    """tests/fixtures/slurm/ (top level) is 22.05; else <version>/ or <version>/rest/."""
    if path.parent == FIXTURES:
        return "22.05"
    return path.parent.parent.name if path.parent.name == "rest" else path.parent.name


def expected_format(path: Path) -> str:
    """The CLI prints its newest format; slurmrestd serves the one in the request path (rest/v0.0.4x_*)."""
    if path.parent.name == "rest":
        version = path.name.split("_", 1)[0]
        return "openapi/v0.0.38" if version == "v0.0.38" else f"data_parser/{version}"
    return EXPECTED_FORMAT[version_of(path)]


EXPECTED_FORMAT = {"22.05": "openapi/v0.0.38", "24.11": "data_parser/v0.0.42"}
STATE_CAPTURES = sorted(FIXTURES.rglob("*_states.json"))  # squeue --only-job-state: its own kind
NOT_SLURM = {"jobs.json"}  # the capture's situation -> job id map
JSON_CAPTURES = sorted(
    p for p in FIXTURES.rglob("*.json") if p not in STATE_CAPTURES and p.name not in NOT_SLURM
)
JOB_CAPTURES = [p for p in JSON_CAPTURES if "jobs" in json.loads(p.read_text())]
NODE_CAPTURES = [p for p in JSON_CAPTURES if p not in JOB_CAPTURES]


def load(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    assert isinstance(doc, dict)
    return doc


def capture(version: str, name: str) -> dict[str, Any]:
    return load(FIXTURES / version / name)


def test_both_versions_are_captured() -> None:
    versions = {version_of(p) for p in JOB_CAPTURES}
    assert {"22.05", "24.11"} <= versions
    assert any(version_of(p) == "24.11" for p in NODE_CAPTURES)


@pytest.mark.parametrize("path", JSON_CAPTURES, ids=lambda p: f"{version_of(p)}/{p.name}")
def test_every_capture_is_understood(path: Path) -> None:
    doc = load(path)
    assert detect_format(doc) == expected_format(path)
    parse = parse_jobs if path in JOB_CAPTURES else parse_nodes
    if doc.get("errors"):
        with pytest.raises(SlurmReportedError):
            parse(doc)
        return
    items = parse(doc)
    assert items, "a capture of a running cluster has jobs/nodes"
    for item in items:
        if path in JOB_CAPTURES:
            assert item.state in states.JOB_BASE_STATES or item.state in states.JOB_FLAG_PRECEDENCE
            assert item.end_time == 0 or item.state in states.TERMINAL_STATES
            assert item.start_time == 0 or item.state != states.PENDING


def _text_for(path: Path) -> Path | None:
    """`scontrol show job -o` text of the same moment as this squeue capture, if there is one."""
    if path.name == "squeue_all.json":
        text = path.with_name("scontrol_jobs.txt")
    else:
        text = path.with_name(path.name.replace("_squeue.json", "_jobs.txt"))
    return text if path.name.endswith(("_squeue.json", "squeue_all.json")) and text.exists() else None


PAIRED = [p for p in JOB_CAPTURES if _text_for(p) is not None]


@pytest.mark.parametrize("path", PAIRED, ids=lambda p: f"{version_of(p)}/{p.name}")
def test_json_says_what_scontrol_says(path: Path) -> None:
    """Same moment, two forms: state (the one word Slurm means), hold, restarts, nodes, ids agree."""
    text = _text_for(path)
    assert text is not None
    from_json = {j.job_id: j for j in parse_jobs(load(path))}
    records = parse_scontrol_jobs(text.read_text())
    assert records
    for record in records:
        job = from_json[record.job_id]
        assert (job.state, job.held, job.restart_count) == (record.state, record.held, record.restart_count)
        assert (job.nodes, job.excluded_nodes, job.comment) == (
            record.nodes,
            record.excluded_nodes,
            record.comment,
        )
        assert (job.array_job_id, job.array_task_id) == (record.array_job_id, record.array_task_id)
        assert (job.het_job_id, job.het_job_offset) == (record.het_job_id, record.het_job_offset)
        assert job.stdout_path == record.stdout_path and job.submit_time == record.submit_time
        if job.state in states.TERMINAL_STATES:
            assert (job.exit_code, job.exit_signal) == (record.exit_code, record.exit_signal)


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_scenarios_of_both_versions(version: str) -> None:
    jobs = {j.job_id: j for j in parse_jobs(capture(version, "fmt_mixed_squeue.json"))}
    train = jobs["1"]
    assert (train.state, train.nodes, train.num_nodes, train.comment) == (
        "RUNNING",
        ("node1", "node2"),
        2,
        OPT_IN,
    )
    assert train.stdout_path.endswith("/jobs/train %x-1.out") and train.end_time == 0
    assert (jobs["2"].state, jobs["2"].held, jobs["2"].reason) == ("PENDING", True, "JobHeldUser")
    assert (jobs["3"].state, jobs["3"].exit_code, jobs["3"].exit_signal) == ("FAILED", 3, 0)
    assert (jobs["4"].state, jobs["4"].exit_code) == ("COMPLETED", 0)
    remainder = jobs["5"]
    assert (
        remainder.array_job_id == "5" and remainder.array_task_id == "1-3%1" and remainder.state == "PENDING"
    )
    leader, component = jobs["6"], jobs["7"]
    assert (leader.het_job_id, leader.het_job_offset) == ("6", 0)
    assert (component.het_job_id, component.het_job_offset) == ("6", 1)
    assert all(j.het_job_id is None for j in jobs.values() if j.job_id not in ("6", "7"))


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_requeue_hold_while_old_allocation_tears_down(version: str) -> None:
    """24.11 prints ["PENDING", "COMPLETING"]; scontrol (and 22.05's JSON) say COMPLETING."""
    doc = capture(version, "fmt_requeuehold_now_squeue.json")
    job = next(j for j in parse_jobs(doc) if j.job_id == "1")
    if version == "24.11":
        raw = next(j for j in doc["jobs"] if j["job_id"] == 1)
        assert raw["job_state"] == ["PENDING", "COMPLETING"]
    assert job.state in ("COMPLETING", "PENDING") and job.held
    later = next(
        j for j in parse_jobs(capture(version, "fmt_requeuehold_later_squeue.json")) if j.job_id == "1"
    )
    assert (later.state, later.held, later.restart_count) == ("PENDING", True, 1)
    # A held job's start_time is a projection (a year ahead in 24.11) and its end_time junk.
    assert later.start_time == 0 and later.end_time == 0


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_old_allocation_tearing_down_after_a_node_crash_is_completing(version: str) -> None:
    """slurm-lab's capture: 24.11 JSON says ["PENDING","COMPLETING"] / ["NODE_FAIL","COMPLETING"];
    scontrol (captured separately, same situation) says JobState=COMPLETING with FailedNode=."""
    situations = json.loads((FIXTURES / version / "jobs.json").read_text())["jobs"]
    jobs = {j.job_id: j for j in parse_jobs(capture(version, "squeue_node_fail_completing.json"))}
    text = (FIXTURES / version / "scontrol_job_node_fail_completing.txt").read_text()
    records = {r.job_id: r for r in parse_scontrol_jobs(text)}
    for key in ("node_fail_requeued", "node_fail_no_requeue"):
        job_id = situations[key]
        if job_id in records and records[job_id].state == "COMPLETING" and job_id in jobs:
            assert jobs[job_id].state == "COMPLETING"
    assert any(j.state == "COMPLETING" for j in jobs.values())
    assert all(r.reason != "None FailedNode" and " " not in r.reason for r in records.values())


def test_24_11_exit_code_objects_and_signals() -> None:
    jobs = {j.job_id: j for j in parse_jobs(capture("24.11", "fmt_node_fail_end_squeue.json"))}
    assert (jobs["3"].exit_code, jobs["3"].exit_signal) == (3, 0)
    cancelled = jobs["8"]  # running, then scancel: SIGTERM, no return code; scontrol says ExitCode=0:15
    assert (cancelled.state, cancelled.exit_code, cancelled.exit_signal) == ("CANCELLED", 0, 15)
    victim = jobs["9"]  # on the killed node with --requeue: Slurm requeued it itself
    assert (victim.state, victim.restart_count, victim.held) == ("PENDING", 1, False)


def test_24_11_nodes_from_scontrol_json_and_grouped_sinfo_agree() -> None:
    nodes = {n.name: n for n in parse_nodes(capture("24.11", "fmt_node_fail_end_nodes.json"))}
    assert (nodes["node3"].state, nodes["node3"].flags) == ("down", ("NOT_RESPONDING",))
    assert (nodes["node4"].state, nodes["node4"].flags) == ("drained", ("DRAIN",))
    assert nodes["node4"].reason.startswith("bad gpu seen by trainguard")
    grouped = {n.name: n for n in parse_nodes(capture("24.11", "fmt_node_fail_end_sinfo.json"))}
    assert set(grouped) == set(nodes)
    assert {k: (v.state, v.flags) for k, v in grouped.items()} == {
        k: (v.state, v.flags) for k, v in nodes.items()
    }
    text = {
        n.name: n
        for n in parse_scontrol_nodes((FIXTURES / "24.11" / "fmt_node_fail_end_nodes.txt").read_text())
    }
    assert {k: (v.state, set(v.flags)) for k, v in text.items()} == {
        k: (v.state, set(v.flags)) for k, v in nodes.items()
    }


def test_text_entry_point_reads_24_11_nodes() -> None:
    text = (FIXTURES / "24.11" / "fmt_node_fail_end_sinfo.json").read_text()
    assert {n.name for n in parse_sinfo_json(text)} == {"node1", "node2", "node3", "node4"}


# --- v0.0.43 (Slurm 25.x): built from the published schema, not captured -------------------------


def as_v0043(doc: dict[str, Any]) -> dict[str, Any]:
    """A 24.11 capture changed as openapi_spec_v43.json says: new data_parser, expanded paths."""
    new = copy.deepcopy(doc)
    new["meta"]["plugin"]["data_parser"] = "data_parser/v0.0.43"
    new["meta"]["slurm"] = {"version": {"major": "25", "micro": "1", "minor": "05"}, "release": "25.05.1"}
    for job in new.get("jobs", []):
        job["stdout_expanded"] = f"/scratch/expanded/{job['job_id']}.out"
        job["stderr_expanded"] = f"/scratch/expanded/{job['job_id']}.err"
    return new


def test_v0043_jobs_and_nodes() -> None:
    doc = as_v0043(capture("24.11", "fmt_mixed_squeue.json"))
    assert detect_format(doc) == "data_parser/v0.0.43"
    jobs = {j.job_id: j for j in parse_jobs(doc)}
    assert (
        jobs["1"].stdout_path == "/scratch/expanded/1.out"
        and jobs["1"].stderr_path == "/scratch/expanded/1.err"
    )
    assert (jobs["1"].state, jobs["2"].held, jobs["7"].het_job_offset) == ("RUNNING", True, 1)
    nodes = as_v0043(capture("24.11", "fmt_node_fail_end_nodes.json"))
    assert detect_format(nodes) == "data_parser/v0.0.43"
    assert {n.name: n.state for n in parse_nodes(nodes)}["node4"] == "drained"


def test_v0043_minimal_document_from_schema() -> None:
    """Only fields the v0.0.43 schema defines, with its number/exit-code/state encodings."""

    def num(value: int, *, is_set: bool = True) -> dict[str, Any]:
        return {"set": is_set, "infinite": False, "number": value}

    doc = {
        "meta": {
            "plugin": {
                "type": "openapi/slurmctld",
                "name": "Slurm OpenAPI slurmctld",
                "data_parser": "data_parser/v0.0.43",
            }
        },
        "jobs": [
            {
                "job_id": 41,
                "job_state": ["PENDING", "REQUEUED"],
                "state_reason": "None",
                "priority": num(0),
                "hold": True,
                "restart_cnt": 2,
                "submit_time": num(1_800_000_000),
                "start_time": num(1_830_000_000),
                "end_time": num(1_900_000_000),
                "exit_code": {
                    "status": ["PENDING"],
                    "return_code": num(0, is_set=False),
                    "signal": {"id": num(0, is_set=False), "name": ""},
                },
                "het_job_id": num(0),
                "array_job_id": num(0),
                "array_task_id": num(0, is_set=False),
                "node_count": num(4),
                "nodes": "",
                "stdout_expanded": "/w/41.out",
                "a_field_from_the_future": {"x": [1, 2]},
            }
        ],
        "last_backfill": num(0),
        "last_update": num(0),
        "errors": [],
        "warnings": [],
    }
    (job,) = parse_jobs(doc)
    assert (job.state, job.held, job.restart_count, job.num_nodes) == ("REQUEUED", True, 2, 4)
    assert (job.start_time, job.end_time, job.exit_code) == (1_830_000_000, 0, None)
    assert job.stdout_path == job.stderr_path == "/w/41.out"


# --- robustness ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_unknown_keys_never_change_known_fields(version: str) -> None:
    doc = capture(version, "fmt_mixed_squeue.json")
    noisy = copy.deepcopy(doc)
    noisy["meta"]["new_meta"] = {"a": 1}
    noisy["brand_new_top_level"] = [1, 2, 3]
    for job in noisy["jobs"]:
        job["zz_new_field"] = {"set": True, "nested": ["RUNNING"]}
        job["job_state_v2"] = "FAILED"
    assert parse_jobs(noisy) == parse_jobs(doc)


def test_unknown_state_flags_are_not_the_state() -> None:
    doc = capture("24.11", "fmt_mixed_squeue.json")
    doc["jobs"][0]["job_state"] = ["SOME_NEW_FLAG", "RUNNING"]
    assert parse_jobs(doc)[0].state == "RUNNING"


@pytest.mark.parametrize(
    ("base", "flags", "word"),
    [
        ("PENDING", ["COMPLETING"], "COMPLETING"),
        ("PENDING", ["REQUEUED"], "REQUEUED"),
        ("PENDING", ["REQUEUED", "COMPLETING"], "COMPLETING"),
        ("RUNNING", ["CONFIGURING"], "CONFIGURING"),
        ("FAILED", ["LAUNCH_FAILED"], "FAILED"),
        ("PENDING", [], "PENDING"),
    ],
)
def test_state_word_is_what_scontrol_prints(base: str, flags: list[str], word: str) -> None:
    assert states.job_state_from_list([base, *flags])[0] == word
    assert states.job_state_word(base, flags) == word


@pytest.mark.parametrize(
    "doc",
    [
        {"meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}}, "jobs": "not a list"},
        {"meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}}},
        {"meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}}, "jobs": [{"job_id": 1, "job_state": 7}]},
        {"meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}}, "jobs": [{"job_id": {"number": 1}}]},
        {
            "meta": {"plugin": {"type": "openapi/v0.0.38"}},
            "jobs": [{"job_id": 1, "priority": {"set": "yes"}}],
        },
        {"jobs": []},
        {"nonsense": True},
    ],
)
def test_unreadable_documents_raise_a_typed_error_never_an_empty_list(doc: dict[str, Any]) -> None:
    with pytest.raises(SlurmFormatError):
        parse_jobs(doc)


def test_slurm_reported_errors_are_retryable_not_empty() -> None:
    doc = capture("24.11", "fmt_mixed_squeue.json")
    doc["jobs"] = []
    doc["errors"] = [{"description": "Unable to contact slurm controller", "error_number": 1007}]
    with pytest.raises(SlurmReportedError):
        parse_jobs(doc)


def test_format_from_release_when_plugin_is_missing() -> None:
    assert detect_format({"meta": {"Slurm": {"release": "22.05.8"}}, "jobs": []}) == "openapi/v0.0.38"
    assert detect_format({"meta": {"slurm": {"release": "24.11.5"}}, "jobs": []}) == "data_parser/v0.0.42"
    assert (
        detect_format({"meta": {"slurm": {"version": {"major": "23", "minor": "11"}}}})
        == "data_parser/v0.0.40"
    )
    assert detect_format({"meta": {"slurm": {"release": "25.11.0"}}}) == "data_parser/v0.0.43"
    # A data_parser newer than any known one is read with the newest adapter.
    doc = as_v0043(capture("24.11", "fmt_mixed_squeue.json"))
    doc["meta"]["plugin"]["data_parser"] = "data_parser/v0.0.44"
    assert detect_format(doc) == "data_parser/v0.0.44" and len(parse_jobs(doc)) == 8


def test_format_error_is_a_parse_error() -> None:
    assert issubclass(SlurmFormatError, SlurmParseError)


# --- scontrol -o text ------------------------------------------------------------------------------


def test_unknown_scontrol_key_is_never_swallowed_into_the_previous_field() -> None:
    line = (FIXTURES / "24.11" / "fmt_node_fail_end_jobs.txt").read_text().splitlines()[0]
    assert "ReqTRES=" in line and "AllocTRES=" in line  # real 24.11 keys 22.05 did not print
    with_new_keys = line.replace("Dependency=(null)", "FailedNode=node4 BrandNewKey=a,b Dependency=(null)")
    text_22 = line.replace("Reason=", "Reason=None FailedNode=node4 X_Y=1 Reason2=")
    (job,) = parse_scontrol_jobs(with_new_keys)
    assert job.reason.startswith("ReqNodeNotAvail") and " " not in job.reason
    assert job.restart_count == 1 and job.comment == OPT_IN
    (other,) = parse_scontrol_jobs(text_22)
    assert other.reason == "None"


def test_key_like_user_text_in_a_free_text_field_is_ambiguous() -> None:
    from trainguard.slurm.errors import AmbiguousOutputError

    line = (FIXTURES / "24.11" / "fmt_node_fail_end_jobs.txt").read_text().splitlines()[0]
    hostile = line.replace(f"Comment={OPT_IN}", f"Comment={OPT_IN} evil=1")
    with pytest.raises(AmbiguousOutputError):
        parse_scontrol_jobs(hostile)
    repeated = line.replace(f"Comment={OPT_IN}", f"Comment={OPT_IN} JobState=COMPLETED")
    with pytest.raises(AmbiguousOutputError):
        parse_scontrol_jobs(repeated)


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_scontrol_text_captures_parse(version: str) -> None:
    for path in sorted((FIXTURES / version).glob("*_job*.txt")):
        assert parse_scontrol_jobs(path.read_text())
    for path in sorted((FIXTURES / version).glob("*_nodes.txt")):
        assert {n.name for n in parse_scontrol_nodes(path.read_text())} == {
            "node1",
            "node2",
            "node3",
            "node4",
        }


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_every_printed_job_id_form_is_recognised(version: str) -> None:
    from trainguard.slurm.jobids import JobIdKind, parse_job_id

    kinds = set()
    for path in sorted((FIXTURES / version).glob("*_squeue_ids.txt")):
        for line in path.read_text().splitlines():
            kinds.add(parse_job_id(line.split("|", 1)[0]).kind)
    assert kinds == {JobIdKind.PLAIN, JobIdKind.ARRAY_TASK, JobIdKind.ARRAY_PENDING, JobIdKind.HET_COMPONENT}
