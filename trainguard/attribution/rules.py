"""Rule-based attribution: decide what happened from a bag of findings.

The first failure decides, not the loudest. Among the fatal findings:
1. cascades (NCCL watchdog timeouts, "taking the entire process down", launcher wrappers, srun
   teardown, SIGTERM) are set aside while anything initiating exists;
2. of the rest, the highest priority class wins: a platform verdict (Xid, ECC, node failure, time
   limit, OOM killer) explains the application-level errors it causes, and a specific error beats a
   generic traceback line;
3. inside that class the earliest finding (time, then byte offset in the log) decides.

Knowing the job narrows the evidence first: findings that name only hosts outside its allocation are set
aside, host names are spelled as Slurm spells them, and while the job is RUNNING only evidence that shows
it failing (trainguard.detection.severity) can make the verdict fatal; the rest is recorded and watched.

Every verdict carries a confidence: platform verdicts 0.9, specific errors 0.8, generic ones 0.6, a
bare signal kill 0.5, and cascades alone (a NCCL watchdog timeout with nothing that decides it) 0.45.
A collective timeout is decided for one rank's node when PyTorch names the rank it waited for (0.7) or
when that rank alone is silent in an otherwise aligned timeout (0.6; trainguard.detection.collectives).
Corroboration by a second finding of the same category adds 0.05. The policy excludes no node on a
verdict below its `exclude_min_confidence`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

from trainguard.detection import collectives
from trainguard.detection.severity import (
    job_is_running,
    shows_running_job_failing,
    slurm_names,
    split_by_allocation,
)
from trainguard.models import Attribution, Category, Finding, JobSnapshot, Verdict, clip

MAX_EVIDENCE = 5

_CONFIDENCE = {3: 0.9, 2: 0.8, 1: 0.6}
CASCADE_ONLY_CONFIDENCE = 0.45
# A collective timeout decided for one rank's node: PyTorch named the rank (desync report, flight
# recorder, monitored barrier), or the rank was the one silent in an otherwise aligned timeout.
NAMED_RANK_CONFIDENCE = 0.7
SILENT_RANK_CONFIDENCE = 0.6
MISSING_RANK_PATTERN = "collective_missing_rank"
# A node that never booted: srun gave up waiting for it, power saving's ResumeTimeout passed, or the cloud
# could not launch its instance. Such a finding attributes a node failure reported for the same node.
NEVER_BOOTED_PATTERNS = frozenset(
    {"slurm_nodes_boot_failed", "cloud_node_resume_timeout", "cloud_node_launch_failed"}
)
# The scheduler's word that it lost a node (NODE_FAIL, `not responding`, a launch slurmd did not take): Slurm
# cannot tell why. The same log may say why (docs/detection.md, "Slurm node failures, second pass"): the
# cluster's node-address set-up (a name Slurm cannot resolve, `check slurm.conf`) makes it the site's
# software's, a hardware line on that node the hardware's (a no-op while these entries default to hardware;
# it keeps a hardware line deciding if that default changes).
NODE_LOSS_PATTERNS = frozenset(
    {
        "slurm_node_failure",
        "slurm_node_not_responding",
        "slurmctld_job_killed_on_failed_node",
        "slurmctld_job_lost_on_node",
        "slurm_node_launch_or_kill_failed",
    }
)
NODE_ADDRESS_PATTERNS = frozenset({"slurm_node_name_unresolved", "slurm_node_address_unknown"})
SIGNAL_KILL_CONFIDENCE = 0.5
WATCHED_CONFIDENCE = 0.6
_WORK = re.compile(r"SeqNum=(?P<seq>\d+), OpType=(?P<op>[A-Z_]+)")
# Newer PyTorch names the process group: `[PG 0 Rank 3]`, `[PG ID 0 PG GUID 0(default_pg) Rank 3]`.
_PG_RANK = re.compile(r"\[PG (?:ID )?(?P<pg>\d+)[^\]]*?Rank (?P<rank>\d+)\]")
_NODE_CATEGORIES = {
    Category.GPU_HARDWARE,
    Category.INTERCONNECT,
    Category.SLURM_NODE_FAILURE,
    Category.STORAGE_IO,
    Category.NCCL_ERROR,
    Category.STRAGGLER,
}


def order_key(f: Finding) -> tuple[float, float, int]:
    ts = f.timestamp if f.timestamp is not None else math.inf
    return (ts, float(f.offset) if f.offset is not None else math.inf, f.line_no or 0)


def teardown_kills_as_cascades(findings: Sequence[Finding], fatal: list[Finding]) -> list[Finding]:
    """Signal kills printed after a launcher's teardown line are its teardown: cascades.

    A launcher that kills the job's other processes once one ended says so in a line the catalog marks
    `tears_down` (Lightning's child-process observer, torchelastic's first-failure line, DeepSpeed's
    `exits with return code`, srun's `Terminating StepId`, ...; docs/detection.md, "Launcher teardown
    lines"). The SIGKILLs and SIGTERMs that follow it (the shell's `Killed`, srun's `task N: Killed`) are
    the launcher's doing, so the end the line reports, or an error before it, decides. The teardown line
    itself and every kill printed before it are left as they are: a kill from outside (the OOM killer, an
    operator) that ended the first process is reported before the launcher tears down, or by that line.
    """
    teardowns = [f for f in findings if f.tears_down]
    if not teardowns:
        return fatal
    first = order_key(min(teardowns, key=order_key))
    return [
        f.model_copy(update={"cascade": True})
        if f.category == Category.SIGNAL_KILL and not f.cascade and not f.tears_down and order_key(f) > first
        else f
        for f in fatal
    ]


def block_layout(job: JobSnapshot, tasks_per_node: int) -> Callable[[int], str | None]:
    """Slurm's default block distribution: ranks 0..n-1 on the first node, and so on."""

    def node_of_rank(rank: int) -> str | None:
        if tasks_per_node <= 0 or rank < 0:
            return None
        index = rank // tasks_per_node
        return job.nodes[index] if index < len(job.nodes) else None

    return node_of_rank


def _nodes_of(f: Finding, node_of_rank: Callable[[int], str | None] | None) -> tuple[str, ...]:
    if f.nodes:
        return f.nodes
    # A cascade is printed where the symptom was seen (a survivor): its rank's node is not the cause.
    if f.rank is not None and node_of_rank is not None and not f.cascade:
        node = node_of_rank(f.rank)
        if node:
            return (node,)
    return ()


def _implicated(
    decider: Finding,
    fatal: Sequence[Finding],
    node_of_rank: Callable[[int], str | None] | None,
) -> tuple[str, ...]:
    # An application bug implicates no node, whatever its category (a NCCL usage error, the user's container
    # image): it fails the same wherever it runs.
    if decider.attribution == Attribution.APPLICATION:
        return ()
    if decider.attribution not in (Attribution.HARDWARE, Attribution.SYSTEM_SOFTWARE) and (
        decider.category not in _NODE_CATEGORIES
    ):
        return ()
    # A cascade is printed where the symptom was seen, by a survivor (a watchdog timeout, `taking the entire
    # process down`): the host on its line is the survivor's, so a cascade decides no node, even when it
    # alone decides the category (a rank PyTorch names as missing is decided in _missing_rank instead).
    nodes: dict[str, None] = {} if decider.cascade else dict.fromkeys(_nodes_of(decider, node_of_rank))
    for f in sorted(fatal, key=order_key):
        if f.category == decider.category and not f.cascade:
            nodes.update(dict.fromkeys(_nodes_of(f, node_of_rank)))
    return tuple(nodes)


def _evidence(decider: Finding, others: Sequence[Finding]) -> tuple[str, ...]:
    lines: dict[str, None] = {}
    for f in (decider, *sorted(others, key=order_key)):
        text = f.line or f.detail
        if text:
            lines.setdefault(clip(text), None)
        if len(lines) >= MAX_EVIDENCE:
            break
    return tuple(lines)


def _mismatched_collectives(cascades: Sequence[Finding]) -> tuple[str, ...]:
    """Watchdog timeouts that name different collectives (sequence number or op type) across ranks:
    the ranks were not in the same collective, which is the program's doing, not the network's."""
    # Only lines that name their process group compare: one rank runs several groups with their own
    # sequence numbers, so without the group id different numbers prove nothing.
    by_group: dict[str, dict[str, tuple[str, str]]] = {}
    for f in cascades:
        if f.category != Category.NCCL_TIMEOUT:
            continue
        work, where = _WORK.search(f.line), _PG_RANK.search(f.line)
        if work and where:
            ranks = by_group.setdefault(where.group("pg"), {})
            ranks.setdefault(where.group("rank"), (work.group("seq"), work.group("op")))
    for ranks in by_group.values():
        works = dict.fromkeys(ranks.values())
        if len(works) > 1:
            return tuple(f"SeqNum={seq} {op}" for seq, op in works)
    return ()


def _missing_rank(
    fatal: Sequence[Finding],
    world_size: int | None,
    layout: Callable[[int], str | None] | None,
) -> tuple[Finding, tuple[str, ...], float, str] | None:
    """(decider, nodes, confidence, why) when the cascades name the one rank a collective waited for."""
    named = sorted((f for f in fatal if f.pattern_id == MISSING_RANK_PATTERN), key=order_key)
    if named:
        first = named[0]
        nodes = first.nodes
        if not nodes and first.rank is not None:
            nodes = collectives.nodes_of_ranks((first.rank,), layout)
        why = f"PyTorch names the rank(s) the collective waited for ({first.detail})"
        sure = bool(nodes) and first.attribution == Attribution.HARDWARE
        return first, nodes, NAMED_RANK_CONFIDENCE if sure else SILENT_RANK_CONFIDENCE, why
    timeouts = [f for f in fatal if f.category == Category.NCCL_TIMEOUT]
    works = [w for f in timeouts if (w := collectives.timed_out_work(f.line, f.rank)) is not None]
    silent = collectives.silent_ranks(works, world_size)
    nodes = collectives.nodes_of_ranks(silent, layout)
    if not nodes:
        return None
    first = min(timeouts, key=order_key)
    ranks = ",".join(map(str, silent))
    why = (
        f"every reporting rank timed out in the same collective (SeqNum={works[0].seq} {works[0].op}); "
        f"rank(s) {ranks} of {world_size} never reported"
    )
    return first, nodes, SILENT_RANK_CONFIDENCE, why


def _never_booted(decider: Finding, fatal: Sequence[Finding]) -> Finding | None:
    """The boot failure that explains a node failure the scheduler blamed on the node's hardware.

    srun reports `Node failure on X` for a node of a new allocation that never came up, before saying
    it never booted; the boot failure (naming the same node, or no node: srun's `Something is wrong with
    the boot of the nodes.` is about the job's own) says the node was never there to fail.
    """
    if decider.category != Category.SLURM_NODE_FAILURE or decider.attribution not in (
        Attribution.HARDWARE,
        Attribution.INFRASTRUCTURE,
    ):
        return None
    for f in sorted(fatal, key=order_key):
        if f.pattern_id in NEVER_BOOTED_PATTERNS and (
            not f.nodes or not decider.nodes or set(f.nodes) & set(decider.nodes)
        ):
            return f
    return None


def _node_loss_explained(decider: Finding, findings: Sequence[Finding]) -> Finding | None:
    """The line that says why the scheduler lost a node, or None (the entry's own attribution stands).

    A hardware finding (fatal or recorded: an Xid, an ECC or machine-check line, `Node unexpectedly
    rebooted`) naming the lost node or no node explains it as the hardware's; the cluster's node-address
    set-up failing (`Can't find an address, check slurm.conf`, slurmctld's `Unable to resolve`) explains a
    node Slurm could not reach as the site's software's, whichever node it names: slurm.conf and name
    resolution are the cluster's. The earliest such line decides.
    """
    if decider.pattern_id not in NODE_LOSS_PATTERNS:
        return None
    for f in sorted(findings, key=order_key):
        if f is decider or f.pattern_id in NODE_LOSS_PATTERNS:
            continue
        if f.pattern_id in NODE_ADDRESS_PATTERNS:
            return f
        same_node = not f.nodes or not decider.nodes or bool(set(f.nodes) & set(decider.nodes))
        if f.attribution == Attribution.HARDWARE and same_node:
            return f
    return None


# Native crash attribution (docs/detection.md, "Native crash attribution: whose code crashed"): the frames
# a crash report prints, innermost first, name the code that faulted. C runtime frames (the signal
# trampoline, abort(), a memcpy handed a bad pointer) are passed over; the first other frame decides: a
# system or installed library is the platform's (system_software), the user's own program or module is the
# application's.
_C_RUNTIME_FRAME = "native_frame_c_runtime"
_CRASH_FRAMES = {
    "native_frame_system_library": Attribution.SYSTEM_SOFTWARE,
    "nccl_native_frame": Attribution.SYSTEM_SOFTWARE,
    "native_frame_installed_object": Attribution.SYSTEM_SOFTWARE,
    "native_frame_user_object": Attribution.APPLICATION,
}
# A machine check the kernel logged on the node: the crash is the hardware's.
_MACHINE_CHECK = "kernel_machine_check_logged"
# The kernel's own report (arch/x86/mm/fault.c show_signal_msg, arch/x86/kernel/traps.c show_signal, then
# mm/memory.c print_vma_addr): `<comm>[<pid>]: segfault at <addr> ip <ip> sp <sp> error <n> in <object>[...]`.
_KERNEL_CRASH = re.compile(
    r"(?P<comm>[^\s\[\]:]+)\[\d+\]:? (?:segfault at [0-9a-f]+|trap [a-z ]+|general protection fault) "
    r"ip[ :]\S+ sp[ :]\S+ error[ :]\S+ in (?P<obj>[^\s\[]+)\["
)
_C_RUNTIME_OBJECT = re.compile(
    r"^(libc|libpthread|libdl|librt|libm|libgcc_s|libstdc\+\+|ld-linux[\w-]*|ld)[.-]"
)
_SYSTEM_OBJECT = re.compile(
    r"^(libnccl|librccl|libcuda|libcudart|libcublas|libcudnn|libnvidia-|libnvrtc|libcufft|libcusparse|libcurand"
    r"|libcusolver|libnvshmem|libucs|libuct|libucp|libucm|libfabric|libibverbs|librdmacm|libmlx[45]|libefa|libmpi"
    r"|libopen-pal|libopen-rte|libpmix|libpsm|libhwloc|libgdrapi|libgomp|libiomp5|libomp|libtbb|libtorch|libc10"
    r"|libpython|libamdhip64|libhsa-runtime64|libtpu|libxla|libtensorflow|libpaddle)"
)
# The non-fatal findings native_crash_site reads: the live watch keeps them beside the fatal ones it collects
# (activities/watch.py), so a watched job's crash is attributed as `trainguard classify` attributes its log.
NATIVE_CRASH_EVIDENCE = frozenset({_C_RUNTIME_FRAME, _MACHINE_CHECK, *_CRASH_FRAMES})


def read_as_evidence(f: Finding) -> bool:
    """A non-fatal finding the rules read (a native crash's frames, a launcher's teardown line): the live
    watch keeps it beside the fatal ones it collects (activities/watch.py)."""
    return not f.fatal and (f.pattern_id in NATIVE_CRASH_EVIDENCE or f.tears_down)


_INTERPRETER = re.compile(r"^(python[\d.]*m?|pypy[\d.]*|java|node|ruby|perl|bash|sh)$")


def kernel_crash_object(line: str) -> Attribution | None:
    """Whose code the kernel's segfault / trap line names: a C runtime or system library -> system_software;
    the process's own executable (not an interpreter) -> application; anything else -> None (undecided)."""
    m = _KERNEL_CRASH.search(line)
    if m is None:
        return None
    comm, obj = m.group("comm"), m.group("obj")
    if _C_RUNTIME_OBJECT.match(obj) or _SYSTEM_OBJECT.match(obj):
        return Attribution.SYSTEM_SOFTWARE
    # comm is the executable's name cut to 15 characters (TASK_COMM_LEN).
    if obj[:15] == comm and not _INTERPRETER.match(comm):
        return Attribution.APPLICATION
    return None


def native_crash_site(decider: Finding, findings: Sequence[Finding]) -> tuple[Attribution, str] | None:
    """(attribution, why) for a native crash (category segfault) from what its report names, or None."""
    if decider.category != Category.SEGFAULT:
        return None
    ordered = sorted(findings, key=order_key)
    for f in ordered:
        if f.pattern_id == _MACHINE_CHECK:
            return Attribution.HARDWARE, f"the kernel logged a machine check on the node ({f.pattern_id})"
    for f in ordered:
        if f.pattern_id in _CRASH_FRAMES:
            who = _CRASH_FRAMES[f.pattern_id]
            place = (
                "the user's own code" if who == Attribution.APPLICATION else "a system or installed library"
            )
            return who, f"the innermost frame past the C runtime is in {place} ({clip(f.line, 120)})"
    for f in ordered:
        named = kernel_crash_object(f.line) if f.category == Category.SEGFAULT else None
        if named is not None:
            place = "the program's own executable" if named == Attribution.APPLICATION else "a system library"
            return named, f"the kernel's report names {place}"
    return None


def _watched(findings: Sequence[Finding], why: str) -> Verdict:
    fatal = sorted((f for f in findings if f.fatal), key=order_key)
    first = fatal[0] if fatal else None
    return Verdict(
        category=first.category if first else Category.HEALTHY,
        attribution=Attribution.NONE,
        fatal=False,
        confidence=WATCHED_CONFIDENCE,
        evidence=_evidence(first, fatal[1:]) if first else (),
        summary=clip(why, 300),
        pattern_ids=tuple(dict.fromkeys(f.pattern_id for f in fatal)),
    )


def attribute(
    findings: Sequence[Finding],
    job: JobSnapshot | None = None,
    *,
    tasks_per_node: int | None = None,
    node_of_rank: Callable[[int], str | None] | None = None,
    world_size: int | None = None,
) -> Verdict:
    if node_of_rank is None and job is not None and tasks_per_node:
        node_of_rank = block_layout(job, tasks_per_node)
    if world_size is None and job is not None and job.num_tasks > 0:
        world_size = job.num_tasks
    # For naming a missing rank's node only: the allocation's order when nothing better is known.
    layout = node_of_rank
    if layout is None and job is not None and job.nodes:
        layout = collectives.allocation_layout(job.nodes, job.num_tasks)
    own, foreign = split_by_allocation(findings, job)
    findings = [slurm_names(f, job) for f in own]
    if job_is_running(job) and any(f.fatal for f in findings):
        if not any(shows_running_job_failing(f, job) for f in findings):
            outside = f"; {len(foreign)} finding(s) naming hosts outside the job set aside" if foreign else ""
            return _watched(
                findings,
                "recorded and watched: the job is RUNNING and no evidence shows it failing (it has not "
                "stopped, its progress has not stopped, no hardware-grade error on its own nodes)" + outside,
            )
    elif job_is_running(job) and foreign and not findings:
        return _watched(foreign, f"{len(foreign)} finding(s) name only hosts outside the job: set aside")
    fatal = teardown_kills_as_cascades(findings, [f for f in findings if f.fatal])
    if not fatal:
        slow = sorted((f for f in findings if f.category == Category.STRAGGLER), key=order_key)
        if slow:
            first = slow[0]
            return Verdict(
                category=Category.STRAGGLER,
                attribution=first.attribution,
                fatal=False,
                confidence=0.5,
                nodes=_implicated(first, slow, node_of_rank),
                evidence=_evidence(first, slow[1:]),
                summary=f"straggler: {first.detail}",
                pattern_ids=(first.pattern_id,),
            )
        return Verdict(category=Category.HEALTHY, attribution=Attribution.NONE, fatal=False, confidence=0.7)
    initiating = [f for f in fatal if not f.cascade]
    pool = initiating or fatal
    top = max(f.priority for f in pool)
    decider = min((f for f in pool if f.priority == top), key=order_key)
    attribution = decider.attribution
    confidence = _CONFIDENCE.get(top, 0.6) if initiating else CASCADE_ONLY_CONFIDENCE
    if decider.category == Category.SIGNAL_KILL:
        confidence = SIGNAL_KILL_CONFIDENCE
    if sum(1 for f in fatal if f.category == decider.category) > 1:
        confidence = min(0.95, confidence + 0.05)
    others = [f for f in fatal if f is not decider]
    cascades = sum(1 for f in fatal if f.cascade)
    where = f" line {decider.line_no}" if decider.line_no else ""
    summary = f"{decider.category.value} ({decider.attribution.value}) from {decider.pattern_id}{where}"
    if decider.category == Category.SIGNAL_KILL:
        summary = (
            f"signal kill (SIGKILL) with no OOM evidence, cause unknown, from {decider.pattern_id}{where}"
        )
    booted = _never_booted(decider, fatal)
    if booted is not None:
        attribution = booted.attribution
        summary = f"{decider.category.value} ({attribution.value}) from {decider.pattern_id}{where}"
        summary += f"; the node never booted ({booted.pattern_id})"
    explained = _node_loss_explained(decider, findings) if booted is None else None
    if explained is not None:
        attribution = explained.attribution
        summary = f"{decider.category.value} ({attribution.value}) from {decider.pattern_id}{where}"
        summary += f"; the node's loss is explained by {explained.pattern_id}"
    site = native_crash_site(decider, findings) if booted is None else None
    if site is not None:
        attribution = site[0]
        summary = f"{decider.category.value} ({attribution.value}) from {decider.pattern_id}{where}"
        summary += f"; {site[1]}"
    mismatch = () if initiating else _mismatched_collectives(fatal)
    missing = None if initiating or mismatch else _missing_rank(fatal, world_size, layout)
    nodes = _implicated(decider, fatal, node_of_rank)
    if mismatch:
        attribution, confidence = Attribution.APPLICATION, 0.7
        summary += f"; ranks timed out in different collectives ({', '.join(mismatch[:4])}): the program's"
    elif missing is not None:
        decider, nodes, confidence, why = missing
        attribution = (
            decider.attribution if decider.pattern_id == MISSING_RANK_PATTERN else Attribution.HARDWARE
        )
        where = f" line {decider.line_no}" if decider.line_no else ""
        summary = f"{decider.category.value} ({attribution.value}) from {decider.pattern_id}{where}; {why}"
        if nodes:
            summary += f": node {', '.join(nodes)}"
        others = [f for f in fatal if f is not decider]
    if cascades and initiating:
        summary += f"; {cascades} cascade finding(s) set aside"
    if foreign:
        summary += f"; {len(foreign)} finding(s) naming hosts outside the job set aside"
    return Verdict(
        category=decider.category,
        attribution=attribution,
        fatal=True,
        confidence=round(confidence, 2),
        nodes=nodes,
        evidence=_evidence(decider, others),
        summary=summary,
        pattern_ids=tuple(dict.fromkeys(f.pattern_id for f in (decider, *sorted(others, key=order_key)))),
    )
