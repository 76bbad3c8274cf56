"""Run every onboarding check for one job and collect a Report."""

from __future__ import annotations

import time
from dataclasses import dataclass

from trainguard.models import JobSnapshot
from trainguard.settings import Settings
from trainguard.signals.logs import NS, Window, check_logs
from trainguard.signals.metrics import check_metrics
from trainguard.signals.report import Report, Status
from trainguard.slurm import commands, parsers
from trainguard.slurm.access import SlurmAccess
from trainguard.slurm.factory import make_slurm_access
from trainguard.slurm.runner import CommandError, Runner

SLURM_TIMEOUT_S = 20.0
REST_HINT = "check cluster.slurmrestd (url, user, token or token_file) and that slurmrestd is running"
FUTURE_WINDOW_S = 24 * 3600.0


@dataclass(frozen=True)
class CheckRequest:
    job_id: str
    marker: str | None = None
    since_s: float = 24 * 3600.0  # how far back to look when Slurm gives no submit time
    use_slurm: bool = True


def _why(err: Exception) -> str:
    text = err.stderr if isinstance(err, CommandError) and err.stderr else str(err)
    return text.strip().splitlines()[0][:160] if text.strip() else type(err).__name__


async def _slurm_job(report: Report, runner: Runner, job_id: str) -> JobSnapshot | None:
    try:
        result = await runner.run(commands.scontrol_show_job(job_id), timeout=SLURM_TIMEOUT_S)
        if result.returncode != 0:
            raise CommandError(result.argv, result.returncode, result.stderr, retryable=False)
        job = parsers.parse_scontrol_job(result.stdout, job_id)
    except (CommandError, ValueError) as err:
        report.add(
            "slurm.job",
            Status.WARN,
            f"job {job_id} not found through scontrol: {_why(err)}",
            "use a running or recently finished job (MinJobAge) so paths and times are known",
        )
        return None
    report.add(
        "slurm.job", Status.PASS, f"job {job_id} is {job.state or 'known'} on {len(job.nodes)} node(s)"
    )
    return job


async def _slurm_nodes(report: Report, runner: Runner) -> set[str] | None:
    try:
        result = await runner.run(commands.sinfo_json(), timeout=SLURM_TIMEOUT_S)
        if result.returncode != 0:
            raise CommandError(result.argv, result.returncode, result.stderr, retryable=False)
        nodes = {n.name for n in parsers.parse_sinfo_json(result.stdout)}
    except (CommandError, ValueError) as err:
        report.add(
            "slurm.nodes",
            Status.FAIL,
            f"sinfo failed: {_why(err)}",
            "check cluster.runner / cluster.ssh and SLURM_CONF (cluster.slurm_env)",
        )
        return None
    report.add("slurm.nodes", Status.PASS, f"{len(nodes)} node(s) in Slurm")
    return nodes


async def _rest_job(report: Report, slurm: SlurmAccess, job_id: str) -> JobSnapshot | None:
    try:
        job = await slurm.job(job_id)
    except (CommandError, ValueError) as err:
        report.add("slurm.job", Status.FAIL, f"slurmrestd failed: {_why(err)}", REST_HINT)
        return None
    if job is None:
        report.add(
            "slurm.job",
            Status.WARN,
            f"job {job_id} not found through slurmrestd",
            "use a running or recently finished job (MinJobAge) so paths and times are known",
        )
        return None
    report.add(
        "slurm.job", Status.PASS, f"job {job_id} is {job.state or 'known'} on {len(job.nodes)} node(s)"
    )
    return job


async def _rest_nodes(report: Report, slurm: SlurmAccess) -> set[str] | None:
    try:
        nodes = {n.name for n in (await slurm.snapshot()).nodes}
    except (CommandError, ValueError) as err:
        report.add("slurm.nodes", Status.FAIL, f"slurmrestd failed: {_why(err)}", REST_HINT)
        return None
    report.add("slurm.nodes", Status.PASS, f"{len(nodes)} node(s) in Slurm (slurmrestd)")
    return nodes


async def _slurm_lookups(
    report: Report, settings: Settings, runner: Runner, job_id: str
) -> tuple[JobSnapshot | None, set[str] | None]:
    if settings.cluster.access != "slurmrestd":
        return await _slurm_job(report, runner, job_id), await _slurm_nodes(report, runner)
    slurm = make_slurm_access(settings.cluster, runner)
    try:
        return await _rest_job(report, slurm, job_id), await _rest_nodes(report, slurm)
    finally:
        await slurm.close()


async def run_checks(
    settings: Settings, runner: Runner, request: CheckRequest, now: float | None = None
) -> Report:
    now = time.time() if now is None else now
    report = Report()
    job: JobSnapshot | None = None
    nodes: set[str] | None = None
    if request.use_slurm:
        job, nodes = await _slurm_lookups(report, settings, runner, request.job_id)
    else:
        report.add("slurm.job", Status.SKIP, "--no-slurm")
        report.add("slurm.nodes", Status.SKIP, "--no-slurm")
    # An hour before submission, so lines of an earlier job with the same id label show up (and warn).
    start = (job.submit_time - 3600) if job and job.submit_time else now - request.since_s
    # The window reaches a day ahead so that lines stamped in the future are seen and reported.
    window = Window(start_ns=int(start * NS), end_ns=int((now + FUTURE_WINDOW_S) * NS))
    await check_logs(report, settings.logs, runner, job, request.job_id, request.marker, window, now)
    await check_metrics(report, settings.metrics, nodes, now)
    return report
