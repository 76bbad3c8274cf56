"""Process-management interface messages, derived from their sources (issue 12 section 1, "generalise, don't
memorise").

What Slurm's MPI plugins, Open MPI and MPICH print when the process-management interface (PMI-1, PMI-2, PMIx)
that starts and wires up the ranks fails (docs/detection.md, "Process-management interface messages, from
their sources"): SchedMD/slurm at 284c3b95f08a2dc2478499837b03355e1b9c5c75
(src/plugins/mpi/pmix/pmixp_debug.h, mpi_pmix.c, pmixp_server.c, pmixp_client.c, pmixp_coll_ring.c,
pmixp_coll_tree.c; src/plugins/mpi/pmi2/mpi_pmi2.c, setup.c, tree.c, pmi2.c, kvs.c;
src/plugins/mpi/cray_shasta/mpi_cray_shasta.c; slurm-20-11-0-1 for the older prefork hook's name),
open-mpi/ompi v4.1.8 (orte/mca/ess/base/help-ess-base.txt, opal/mca/pmix/base/help-pmix-base.txt,
opal/mca/pmix/s1/pmix_s1.c) and 8efebee745 (ompi/runtime/help-mpi-runtime.txt, ompi_rte.c), pmodels/mpich
6a79bf6575 (src/pmi/errnames.txt, src/util/mpir_pmi.c, src/pmi/src/pmi_v1.c;
hydra's src/pm/hydra/ for its teardown chain), and openpmix/openpmix 494e9d9d03
(src/util/pmix_error.h, for the look-alike PMIX ERROR log lines). Each positive case below is a format string
with its conversions filled in (the first line of a multi-line help message); every one read healthy on the
code before this change (no entry matched it), so each case can fail. The look-alikes are messages the same
programs print while the job goes on.
"""

from __future__ import annotations

import re

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.classify import classify_text

ADDED = (
    "slurm_mpi_plugin_setup_failed",
    "slurm_pmi_exchange_failed",
    "slurm_pmix_collective_timeout",
    "mpi_pmi_unavailable",
)
# Extended: hydra's teardown chain as its PMI connections close (a cascade, as before).
EXTENDED = ("hydra_proxy_teardown",)

SITE = ("slurm_node_failure", "system_software")
CASCADE = ("python_exception", "application")
EXCHANGE_TIMEOUT = ("nccl_timeout", "system_software")

S = "slurmstepd: error: "

MESSAGES = [
    # src/plugins/mpi/pmix/mpi_pmix.c (prefork, init, srun's prelaunch); PMIXP_ERROR's prefix: pmixp_debug.h
    (
        S + " mpi/pmix_v3: mpi_p_slurmstepd_prefork: gpu-07 [1]: mpi_pmix.c:198: pmixp_stepd_init() failed",
        SITE,
        "slurm_mpi_plugin_setup_failed",
    ),
    (
        S + " mpi/pmix_v4: mpi_p_slurmstepd_prefork: gpu-07 [1]: mpi_pmix.c:202: pmixp_agent_start() failed",
        SITE,
        "slurm_mpi_plugin_setup_failed",
    ),
    (
        S + " mpi/pmix_v2: p_mpi_hook_slurmstepd_prefork: gpu-07 [0]: mpi_pmix.c:161: "
        "pmixp_stepd_init() failed",
        SITE,
        "slurm_mpi_plugin_setup_failed",
    ),
    (
        "srun: error:  mpi/pmix_v5: init: (null) [0]: mpi_pmix.c:171: pmi/pmix: can not load PMIx library",
        SITE,
        "slurm_mpi_plugin_setup_failed",
    ),
    (
        "srun: error:  mpi/pmix_v3: init: (null) [0]: mpi_pmix.c:124: pmi/pmix: incorrect PMIx library "
        "version loaded 4 was loaded, required 3 version",
        SITE,
        "slurm_mpi_plugin_setup_failed",
    ),
    (
        "srun: error:  mpi/pmix_v4: mpi_p_client_prelaunch: (null) [0]: mpi_pmix.c:249: "
        "pmixp_abort_agent_start() failed -1",
        SITE,
        "slurm_mpi_plugin_setup_failed",
    ),
    # src/plugins/mpi/pmix/pmixp_server.c, pmixp_client.c: why pmixp_stepd_init failed
    (
        S + " mpi/pmix_v3: pmixp_stepd_init: gpu-07 [0]: pmixp_server.c:402: pmixp_libpmix_init() failed",
        SITE,
        "slurm_mpi_plugin_setup_failed",
    ),
    (
        S + " mpi/pmix_v3: pmixp_lib_init: gpu-07 [0]: pmixp_client_v2.c:210: "
        "PMIx_server_init failed with error -2",
        SITE,
        "slurm_mpi_plugin_setup_failed",
    ),
    (
        S + " mpi/pmix_v3: pmixp_libpmix_init: gpu-07 [0]: pmixp_client.c:516: "
        'Cannot create server lib tmpdir: "/var/spool/slurmd/pmix.4242.0": Permission denied (13)',
        SITE,
        "slurm_mpi_plugin_setup_failed",
    ),
    # src/plugins/mpi/pmi2/mpi_pmi2.c, setup.c
    (S + "mpi/pmi2: failed to create pmi2 agent thread", SITE, "slurm_mpi_plugin_setup_failed"),
    (S + "mpi/pmi2: unable to find srun comm ifhn in env", SITE, "slurm_mpi_plugin_setup_failed"),
    (S + "mpi/pmi2: unable to find nodes in job environment", SITE, "slurm_mpi_plugin_setup_failed"),
    (
        S + "mpi/pmi2: failed to bind tree socket: Address already in use",
        SITE,
        "slurm_mpi_plugin_setup_failed",
    ),
    ("srun: error: mpi/pmi2: Failed to create tree socket", SITE, "slurm_mpi_plugin_setup_failed"),
    # src/plugins/mpi/cray_shasta/mpi_cray_shasta.c
    (
        S + "mpi/cray_shasta: Couldn't create directory /var/spool/slurmd/mpi_cray_shasta/4242.0: "
        "Permission denied",
        SITE,
        "slurm_mpi_plugin_setup_failed",
    ),
    (
        S + "mpi/cray_shasta: Couldn't change directory /var/spool/slurmd/mpi_cray_shasta/4242.0 owner: "
        "Operation not permitted",
        SITE,
        "slurm_mpi_plugin_setup_failed",
    ),
    # src/plugins/mpi/pmi2/tree.c, pmi2.c: the KVS exchange given up after kvs.c's retries
    (S + "mpi/pmi2: failed to send temp kvs to gpu-03", SITE, "slurm_pmi_exchange_failed"),
    (S + "mpi/pmi2: 303 failed to send temp kvs to srun", SITE, "slurm_pmi_exchange_failed"),
    ("srun: error: mpi/pmi2: failed to send temp kvs to compute nodes", SITE, "slurm_pmi_exchange_failed"),
    # src/plugins/mpi/pmix/pmixp_coll_ring.c, pmixp_coll_tree.c
    (
        S + " mpi/pmix_v3: pmixp_coll_ring_reset_if_to: gpu-07 [1]: pmixp_coll_ring.c:742: 0x1505f8020b70: "
        "collective timeout seq=0",
        EXCHANGE_TIMEOUT,
        "slurm_pmix_collective_timeout",
    ),
    (
        S + " mpi/pmix_v4: pmixp_coll_tree_reset_if_to: gpu-07 [1]: pmixp_coll_tree.c:1314: 0x2aab0c0021a0: "
        "collective timeout seq=4",
        EXCHANGE_TIMEOUT,
        "slurm_pmix_collective_timeout",
    ),
    # Open MPI 4: orte/mca/ess/base/help-ess-base.txt, opal/mca/pmix/base/help-pmix-base.txt, pmix_s1.c
    ('The application appears to have been direct launched using "srun",', SITE, "mpi_pmi_unavailable"),
    ('The application appears to have been direct launched using "aprun",', SITE, "mpi_pmi_unavailable"),
    ("PMI2_Init failed to intialize.  Return code: 14", SITE, "mpi_pmi_unavailable"),
    ("An unexpected version of PMIx was loaded:", SITE, "mpi_pmi_unavailable"),
    ("A version of PMIx was detected that is too old:", SITE, "mpi_pmi_unavailable"),
    ("[gpu-07:12345] PMI_Init [pmix_s1.c:171:s1_init]: PMI is not initialized", SITE, "mpi_pmi_unavailable"),
    # Open MPI 5: ompi/runtime/help-mpi-runtime.txt [no-pmi]
    ("PMIx_Init failed for the following reason:", SITE, "mpi_pmi_unavailable"),
    (
        "Open MPI requires access to a local PMIx server to execute. Please ensure",
        SITE,
        "mpi_pmi_unavailable",
    ),
    # MPICH: src/pmi/errnames.txt (raised by src/util/mpir_pmi.c), src/pmi/src/pmi_v1.c
    ("MPIR_pmi_init(118).............: PMI_Init returned -1", SITE, "mpi_pmi_unavailable"),
    (
        "MPID_Init(407).......................: PMI2 init with process manager failed: -1",
        SITE,
        "mpi_pmi_unavailable",
    ),
    ("MPIR_pmi_init(127): PMI2 failed to receive init ack", SITE, "mpi_pmi_unavailable"),
    (
        "MPIR_pmi_init(127): PMI2 version mismatch (server version 1.1, client version 2.0)",
        SITE,
        "mpi_pmi_unavailable",
    ),
    (
        "MPIR_pmi_init(99): Auto-detection of PMI version failed. Found both env vars PMI_SIZE and "
        "PMIX_NAMESPACE. There is likely something wrong with the runtime environment! Aborting.",
        SITE,
        "mpi_pmi_unavailable",
    ),
    (
        "MPIR_pmi_init(102): Runtime environment uses unsupported PMI version pmix. Aborting.",
        SITE,
        "mpi_pmi_unavailable",
    ),
    ("[unset]: launcher not compatible with PMI1 client", SITE, "mpi_pmi_unavailable"),
    # MPICH hydra: src/pm/hydra/lib/hydra.h (HYDU_ASSERT), lib/tools/demux/demux_poll.c, proxy/pmip.c,
    # mpiexec/pmiserv_pmci.c, mpiexec/mpiexec.c: a cascade, read as the program's end only when alone
    (
        "[proxy:0:0@gpu-07] HYD_pmcd_pmip_control_cmd_cb (pm/pmiserv/pmip_cb.c:887): assert (!closed) failed",
        CASCADE,
        "hydra_proxy_teardown",
    ),
    (
        "[proxy:0:0@gpu-07] HYDT_dmxu_poll_wait_for_event (lib/tools/demux/demux_poll.c:76): "
        "callback returned error status",
        CASCADE,
        "hydra_proxy_teardown",
    ),
    (
        "[proxy:0:0@gpu-07] main (proxy/pmip.c:127): demux engine error waiting for event",
        CASCADE,
        "hydra_proxy_teardown",
    ),
    (
        "[mpiexec@gpu-07] HYD_pmci_wait_for_completion (mpiexec/pmiserv_pmci.c:218): "
        "launcher returned error waiting for completion",
        CASCADE,
        "hydra_proxy_teardown",
    ),
    (
        "[mpiexec@gpu-07] main (mpiexec/mpiexec.c:270): process manager error waiting for completion",
        CASCADE,
        "hydra_proxy_teardown",
    ),
]


@pytest.mark.parametrize(("line", "expected", "entry"), MESSAGES, ids=[m[0][:70] for m in MESSAGES])
def test_pmi_failure_message_is_read(line: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(line + "\n", expected, entry)


def test_every_added_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} >= set(ADDED) | set(EXTENDED)


def test_open_mpi_direct_launch_decides_over_the_mpi_init_abort_it_causes() -> None:
    # Open MPI 4 under `srun` without PMI: the help text, then orte_init's and MPI_Init's abort (a cascade).
    text = (
        "--------------------------------------------------------------------------\n"
        'The application appears to have been direct launched using "srun",\n'
        "but OMPI was not built with SLURM's PMI support and therefore cannot\n"
        "execute. There are several options for building PMI support under\n"
        "--------------------------------------------------------------------------\n"
        "*** An error occurred in MPI_Init_thread\n"
        "*** on a NULL communicator\n"
        "*** MPI_ERRORS_ARE_FATAL (processes in this communicator will now abort,\n"
        "***    and potentially your MPI job)\n"
        "srun: error: gpu-07: task 0: Exited with exit code 1\n"
    )
    assert_read_as(text, SITE, "mpi_pmi_unavailable")


def test_mpich_pmi_init_failure_decides_over_its_error_stack() -> None:
    text = (
        "Fatal error in PMPI_Init_thread: Other MPI error, error stack:\n"
        "MPIR_Init_thread(586)..............:\n"
        "MPIR_pmi_init(118).................: PMI_Init returned -1\n"
    )
    assert_read_as(text, SITE, "mpi_pmi_unavailable")


def test_a_rank_crash_before_the_pmix_fence_decides_over_its_timeout() -> None:
    # The collective times out 300 s after a rank died on the way to it: the crash is printed first.
    text = (
        "[2024-01-01T10:00:00] srun: error: gpu-03: task 5: Segmentation fault (core dumped)\n"
        "[2024-01-01T10:05:00] " + S + " mpi/pmix_v3: pmixp_coll_ring_reset_if_to: gpu-07 [1]: "
        "pmixp_coll_ring.c:742: 0x1505f8020b70: collective timeout seq=0\n"
    )
    r = classify_text(text)
    assert r.fatal
    assert r.category == "segfault", r.pattern_ids


def test_hydra_teardown_after_a_rank_crash_leaves_the_crash_to_decide() -> None:
    text = (
        "[proxy:0:1@gpu-08] HYD_pmcd_pmip_control_cmd_cb (pm/pmiserv/pmip_cb.c:887): "
        "assert (!closed) failed\n"
        "[proxy:0:1@gpu-08] HYDT_dmxu_poll_wait_for_event (tools/demux/demux_poll.c:77): "
        "callback returned error status\n"
        "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
        "=   EXIT CODE: 139\n"
    )
    r = classify_text(text)
    assert r.fatal
    assert r.category == "segfault", r.pattern_ids


@pytest.mark.parametrize(
    "text",
    [
        # kvs.c: temp_kvs_send()'s retry notice (verbose); the exchange goes on
        "slurmstepd: failed to send temp kvs, rc=-1, retrying\n",
        # tree.c: a stale KVS message ignored
        S + "mpi/pmi2: invalid kvs seq from node 2(gpu-03) ignored, expect 3 got 2\n",
        # pmixp_coll_ring.c / pmixp_server.c: out-of-order contributions dropped, the collective goes on
        S + " mpi/pmix_v3: pmixp_coll_ring_check: gpu-07 [1]: pmixp_coll_ring.c:200: 0x1505f8020b70: "
        "unexpected contrib from gpu-03:2, expected is 1\n",
        S + " mpi/pmix_v3: _process_server_request: gpu-07 [1]: pmixp_server.c:980: Wrong collective seq. #3 "
        "from nodeid 2, current is 4, skip this message\n",
        # pmixp_info.c: the ring algorithm falls back to the tree
        S + " mpi/pmix_v3: pmixp_info_set: gpu-07 [0]: pmixp_info.c:210: Ring collective algorithm cannot be "
        "used with Slurm RPC's communication subsystem. Tree-based collective will be used instead.\n",
        # ompi/runtime/help-mpi-runtime.txt [no-pmix-but]: Open MPI 5 starts singletons and runs
        "No PMIx server was reachable, but a PMI1/2 was detected.\n"
        "If srun is being used to launch application,  4 singletons will be started.\n",
        # openpmix src/util/pmix_error.h PMIX_ERROR_LOG: logged on paths the library recovers from
        "[gpu-07:12345] PMIX ERROR: ERROR in file gds_ds12_lock_pthread.c at line 168\n",
        "[gpu-07:12345] PMIX ERROR: UNREACHABLE in file ptl_tcp_component.c at line 1849\n",
        # the debug setting and the help text's advice, not failures
        "export PMIX_MCA_gds=hash SLURM_MPI_TYPE=pmix_v3\n",
        "srun --mpi=pmi2 ./a.out\n",
        # hydra's debug output of the PMI wire protocol (-verbose), not an error
        "[proxy:0:0@gpu-07] PMI response: cmd=barrier_out\n",
    ],
)
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


# The entries name the printing file: Slurm's plugin C files, Open MPI's help texts / C files, MPICH's files.
PMI_SOURCE_FILE = re.compile(
    r"src/plugins/mpi/(pmix|pmi2|cray_shasta)/[a-z0-9_/]*\.c|help-[a-z-]+\.txt|src/(pmi|util|pm/hydra)/[a-z0-9_/]*\.(c|h|txt)"
)


@pytest.mark.parametrize("sig_id", ADDED + EXTENDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id, PMI_SOURCE_FILE)
