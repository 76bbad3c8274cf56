"""Launcher and MPI messages, derived from their sources (issue 12 section 1, "generalise, don't memorise").

Instead of fitting excerpt lines, every message the HPC launch stack prints when a rank or the job ended
abnormally was read out of the printers' source and mapped to TrainGuard's categories (docs/detection.md,
"Launcher and MPI messages, from their sources"): Open MPI 4's ORTE (open-mpi/ompi v4.1.8) and Open MPI 5
(open-mpi/ompi 8efebee745, openpmix/prrte 52d5e4bb1f), MPICH / Intel MPI's hydra (pmodels/mpich 6a79bf6575),
Horovod (horovod/horovod 2626dc87a3), Gloo (facebookincubator/gloo cc44198420) and torchelastic / c10d
(pytorch/pytorch). Each positive case below is the source's format string with its conversions filled in
(the first line of a multi-line help message); each read healthy or as another entry on the code before this
change. The look-alikes are messages a job survives.
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as

# Entries added from the launchers' sources, and the entry this change extended (each comment names the file).
ADDED = (
    "launcher_rank_crash_signal",
    "launcher_rank_terminated",
    "launcher_rank_other_signal",
    "elastic_child_crash_signal",
    "c10d_store_connect_failed",
    "gloo_rendezvous_timeout",
    "elastic_rendezvous_closed",
    "mpirun_exited_due_to_rank",
    "mpirun_job_aborted_by_signal",
    "launcher_nonzero_exit_detected",
    "mpi_abort_called",
    "mpi_errors_are_fatal",
    "mpi_peer_lost",
    "hydra_proxy_teardown",
    "mpirun_start_failed",
    "mpirun_user_timeout",
    "horovod_elastic_stopped",
    "mpirun_daemon_lost",
    "mpirun_daemon_launch_failed",
    "openmpi_tcp_connect_failed",
)
EXTENDED = ("gloo_timeout",)

APP_EXIT = ("python_exception", "application")
SIGNAL = ("signal_kill", "unknown")
CRASH = ("segfault", "system_software")
RENDEZVOUS = ("nccl_timeout", "system_software")
NODE_LOST = ("slurm_node_failure", "hardware")
NODE_SETUP = ("slurm_node_failure", "system_software")
NETWORK = ("interconnect", "infrastructure")
TIME_LIMIT = ("preemption_or_timelimit", "infrastructure")

ORTE_RANK = "mpirun noticed that process rank 3 with PID 4242 on node gpu-07 exited on signal"
PRTE_RANK = "prterun noticed that process rank 3 with PID 4242 on node gpu-07 exited on\n"

# (text, expected category/attribution, deciding entry)
MESSAGES = [
    # orte/tools/orterun/help-orterun.txt [orterun:proc-aborted-strsignal]
    (f"{ORTE_RANK} 4 (Illegal instruction).", CRASH, "launcher_rank_crash_signal"),
    (f"{ORTE_RANK} 8 (Floating point exception).", CRASH, "launcher_rank_crash_signal"),
    (f"{ORTE_RANK} 5 (Trace/breakpoint trap).", CRASH, "launcher_rank_crash_signal"),
    (f"{ORTE_RANK} 15 (Terminated).", SIGNAL, "mpirun_rank_terminated"),
    (f"{ORTE_RANK} 1 (Hangup).", SIGNAL, "launcher_rank_other_signal"),
    (f"{ORTE_RANK} 2 (Interrupt).", SIGNAL, "launcher_rank_other_signal"),
    (f"{ORTE_RANK} 13 (Broken pipe).", SIGNAL, "launcher_rank_other_signal"),
    # src/mca/schizo/prte/help-prun.txt [prun:proc-aborted-strsignal]: wrapped after "exited on"
    (PRTE_RANK + "signal 6 (Aborted).", CRASH, "launcher_rank_crash_signal"),
    (PRTE_RANK + "signal 8 (Floating point exception).", CRASH, "launcher_rank_crash_signal"),
    (PRTE_RANK + "signal 15 (Terminated).", SIGNAL, "mpirun_rank_terminated"),
    (PRTE_RANK + "signal 12 (User defined signal 2).", SIGNAL, "launcher_rank_other_signal"),
    # src/pm/hydra/mpiexec/pmiserv_cb.c: the rank's wait status (MPICH) or 128 + signal (Intel MPI)
    (
        "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   EXIT CODE: 134",
        CRASH,
        "launcher_rank_crash_signal",
    ),
    ("=   EXIT CODE: 6", CRASH, "launcher_rank_crash_signal"),
    ("=   EXIT CODE: 136", CRASH, "launcher_rank_crash_signal"),
    ("=   EXIT CODE: 15", SIGNAL, "launcher_rank_terminated"),
    ("=   EXIT CODE: 143", SIGNAL, "launcher_rank_terminated"),
    # src/pm/hydra/mpiexec/mpiexec.c
    (
        "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Aborted (signal 6)",
        CRASH,
        "launcher_rank_crash_signal",
    ),
    (
        "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Floating point exception (signal 8)",
        CRASH,
        "launcher_rank_crash_signal",
    ),
    (
        "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Terminated (signal 15)",
        SIGNAL,
        "launcher_rank_terminated",
    ),
    (
        "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Hangup (signal 1)",
        SIGNAL,
        "launcher_rank_other_signal",
    ),
    # torch/distributed/elastic/multiprocessing/api.py, errors/__init__.py
    (
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -6) local_rank: 0 (pid: 1234) "
        "of binary: /usr/bin/python",
        CRASH,
        "elastic_child_crash_signal",
    ),
    ("  exitcode  : -4 (pid: 69811)", CRASH, "elastic_child_crash_signal"),
    # torch/csrc/distributed/c10d/socket.cpp; torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py
    (
        "torch.distributed.DistNetworkError: The client socket has failed to connect to any network "
        "address of "
        "(master-0, 23456). The client socket has failed to connect to 10.0.0.5:23456 (errno: 113 - No "
        "route to host).",
        RENDEZVOUS,
        "c10d_store_connect_failed",
    ),
    (
        "[E socket.cpp:957] [c10d] The client socket has timed out after 900s while trying to connect to "
        "(master-0, 29500).",
        RENDEZVOUS,
        "c10d_store_connect_failed",
    ),
    (
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d "
        "store "
        "has failed. See inner exception for details.",
        RENDEZVOUS,
        "c10d_store_connect_failed",
    ),
    # torch/distributed/elastic/rendezvous/api.py
    ("torch.distributed.elastic.rendezvous.api.RendezvousClosedError", APP_EXIT, "elastic_rendezvous_closed"),
    # horovod/common/gloo/http_store.cc; gloo/rendezvous/hash_store.cc
    (
        "gloo::IoException: [/tmp/horovod/third_party/gloo/gloo/rendezvous/http_store.cc:54] Wait "
        "timeout after "
        "30 seconds for key(s): [rank_0]. You may want to increase the timeout via "
        "HOROVOD_GLOO_TIMEOUT_SECONDS",
        RENDEZVOUS,
        "gloo_rendezvous_timeout",
    ),
    (
        "RuntimeError: [/pytorch/third_party/gloo/gloo/rendezvous/hash_store.cc:55] Wait timeout for "
        "key(s): [0]",
        RENDEZVOUS,
        "gloo_rendezvous_timeout",
    ),
    # gloo/transport/ibverbs/unbound_buffer.cc
    (
        "RuntimeError: [../third_party/gloo/gloo/transport/ibverbs/unbound_buffer.cc:135] Timed out waiting "
        "30000ms for recv operation to complete",
        RENDEZVOUS,
        "gloo_timeout",
    ),
    # orte/tools/orterun/help-orterun.txt, src/mca/schizo/prte/help-prun.txt: the launcher's verdicts
    (
        'mpirun has exited due to process rank 0 with PID 4242 on\nnode gpu-07 calling "abort". This '
        "may have "
        "caused other processes",
        APP_EXIT,
        "mpirun_exited_due_to_rank",
    ),
    (
        "prterun has exited due to process rank 0 with PID 4242 on node gpu-07 exiting\nimproperly. "
        "There are "
        "three reasons this could occur:",
        APP_EXIT,
        "mpirun_exited_due_to_rank",
    ),
    (
        'mpirun has exited due to a process exiting without calling "finalize",',
        APP_EXIT,
        "mpirun_exited_due_to_rank",
    ),
    (
        "mpirun noticed that the job aborted, but has no info as to the process\nthat caused that situation.",
        APP_EXIT,
        "mpirun_exited_due_to_rank",
    ),
    (
        "mpirun noticed that the job aborted by signal, but has no info as\nto the process that caused that "
        "situation.",
        SIGNAL,
        "mpirun_job_aborted_by_signal",
    ),
    (
        "mpirun detected that one or more processes exited with non-zero status, thus causing\nthe job to be "
        "terminated. The first process to do so was:",
        APP_EXIT,
        "launcher_nonzero_exit_detected",
    ),
    (
        "prterun detected that one or more processes exited with non-zero status,\nthus causing the job "
        "to be "
        "terminated. The first process to do so was:",
        APP_EXIT,
        "launcher_nonzero_exit_detected",
    ),
    (
        "mpirun was unable to start the specified application as it encountered an\nerror:\n\n"
        "Error code: 1\nError name: (null)\nNode: gpu-07",
        APP_EXIT,
        "mpirun_start_failed",
    ),
    ("The user-provided time limit for job execution has been reached:", TIME_LIMIT, "mpirun_user_timeout"),
    # orte/mca/errmgr/base/help-errmgr-base.txt, PRRTE's src/mca/errmgr/base/help-errmgr-base.txt
    ("ORTE has lost communication with a remote daemon.", NODE_LOST, "mpirun_daemon_lost"),
    ("PRTE has lost communication with a remote daemon.", NODE_LOST, "mpirun_daemon_lost"),
    (
        "mpirun has detected that a required daemon terminated during execution\nof the application with a "
        "non-zero status. This is a fatal error.",
        NODE_LOST,
        "mpirun_daemon_lost",
    ),
    ("ORTE was unable to reliably start one or more daemons.", NODE_SETUP, "mpirun_daemon_launch_failed"),
    ("prterun was unable to reliably start one or more daemons.", NODE_SETUP, "mpirun_daemon_launch_failed"),
    (
        "An ORTE daemon has unexpectedly failed after launch and before\ncommunicating back to mpirun.",
        NODE_SETUP,
        "mpirun_daemon_launch_failed",
    ),
    # ompi/mpi/help-mpi-api.txt; src/mpi/init/init_impl.c (MPICH)
    (
        "MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD\nwith errorcode 1.",
        APP_EXIT,
        "mpi_abort_called",
    ),
    (
        "Abort(1) on node 0 (rank 0 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 1) - process 0",
        APP_EXIT,
        "mpi_abort_called",
    ),
    # ompi/errhandler/help-mpi-errors.txt; src/mpi/errhan/errutil.c (MPICH)
    (
        "[gpu-07:04242] *** An error occurred in MPI_Recv\n[gpu-07:04242] *** reported by process [1234,0]\n"
        "[gpu-07:04242] *** on communicator MPI_COMM_WORLD\n[gpu-07:04242] *** MPI_ERR_TRUNCATE: "
        "message truncated\n"
        "[gpu-07:04242] *** MPI_ERRORS_ARE_FATAL (processes in this communicator will now abort,\n"
        "[gpu-07:04242] ***    and potentially your MPI job)",
        APP_EXIT,
        "mpi_errors_are_fatal",
    ),
    (
        "[gpu-07:04242] *** MPI_ERRORS_ABORT (processes in this communicator will now abort,",
        APP_EXIT,
        "mpi_errors_are_fatal",
    ),
    ("Fatal error in PMPI_Allreduce: Other MPI error, error stack:", APP_EXIT, "mpi_errors_are_fatal"),
    ("Fatal error in internal_Bcast: Other MPI error, error stack:", APP_EXIT, "mpi_errors_are_fatal"),
    # opal/mca/btl/tcp/help-mpi-btl-tcp.txt [peer hung up]; help-orterun.txt [orterun:proc-comm-failed]
    (
        "An MPI communication peer process has unexpectedly disconnected.  This\nusually indicates a "
        "failure in "
        "the peer process (e.g., a crash or",
        APP_EXIT,
        "mpi_peer_lost",
    ),
    (
        "A critical communication path was lost to:\n\n  My name:      [[1234,0],0]\n"
        "  Process name: [[1234,1],3]\n  Node:         gpu-08",
        APP_EXIT,
        "mpi_peer_lost",
    ),
    # opal/mca/btl/tcp/help-mpi-btl-tcp.txt [client connect fail]; btl_tcp_endpoint.c (Open MPI 2-3)
    (
        "WARNING: Open MPI failed to TCP connect to a peer MPI process.  This\nshould not happen.\n\n"
        "Your Open MPI job may now hang or fail.\n\n  Local host: gpu-07\n  PID:        4242\n"
        "  Message:    connect() to 10.0.0.8:1024 failed\n  Error:      No route to host (113)",
        NETWORK,
        "openmpi_tcp_connect_failed",
    ),
    (
        "[gpu-07][[1234,1],3][btl_tcp_endpoint.c:803:mca_btl_tcp_endpoint_complete_connect] connect() to "
        "10.0.0.8 failed: No route to host (113)",
        NETWORK,
        "openmpi_tcp_connect_failed",
    ),
    # src/pm/hydra/lib/utils/sock.c; src/pm/hydra/lib/tools/bootstrap/utils/bscu_wait.c
    (
        "[proxy:0:1@gpu-08] HYDU_sock_write (lib/utils/sock.c:250): write error (Broken pipe)",
        APP_EXIT,
        "hydra_proxy_teardown",
    ),
    (
        "[mpiexec@gpu-07] HYDT_bscu_wait_for_completion (lib/tools/bootstrap/utils/bscu_wait.c:110): "
        "one of the "
        "processes terminated badly; aborting",
        APP_EXIT,
        "hydra_proxy_teardown",
    ),
    # horovod/runner/elastic/registration.py, constants.py, driver.py
    ("ERROR:root:failure count == 4 -> stop running", APP_EXIT, "horovod_elastic_stopped"),
    ("ERROR:root:blacklisted slots count == 4 -> stop running", APP_EXIT, "horovod_elastic_stopped"),
    (
        "RuntimeError: Horovod was shutdown because number of resets during elastic job exceeded limit: 3",
        APP_EXIT,
        "horovod_elastic_stopped",
    ),
    (
        "RuntimeError: Job has been shutdown, see above error messages for details.",
        APP_EXIT,
        "horovod_elastic_stopped",
    ),
    # horovod/runner/gloo_run.py
    (
        "RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus "
        "causing the "
        "job to be terminated. The first process to do so was:",
        APP_EXIT,
        "launcher_nonzero_exit_detected",
    ),
]


@pytest.mark.parametrize(("text", "expected", "entry"), MESSAGES, ids=[m[0][:60] for m in MESSAGES])
def test_launcher_s_ending_message_is_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


def test_every_added_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} >= set(ADDED + EXTENDED)


@pytest.mark.parametrize(
    "text",
    [
        # Open MPI's openib BTL failing to initialise a device: Open MPI falls back to another transport
        # (opal/mca/btl/openib/help-mpi-btl-openib.txt) and the run goes on
        "WARNING: There was an error initializing an OpenFabrics device.\n\n"
        "  Local host:   gpu-07\n  Local device: mlx5_0\n",
        "WARNING: There is at least non-excluded one OpenFabrics device found,\n"
        "but there are no active ports detected (or Open MPI was unable to use\n"
        "them).  This is most certainly not what you wanted.\n",
        "[gpu-07:04242] 7 more processes have sent help message help-mpi-btl-openib.txt / error in "
        "device init\n"
        '[gpu-07:04242] Set MCA parameter "orte_base_help_aggregate" to 0 to see all help / error messages\n',
        # mpirun relaying a signal to the job (orte/mca/ess/hnp/ess_hnp_module.c), its notes, its command line
        "mpirun: Forwarding signal 12 to job\n",
        "NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.\n",
        "mpirun --timeout 3600 -np 8 python train.py\n",
        # a TCP BTL read error at MPI_Finalize when the peer exited first (opal/mca/btl/tcp/btl_tcp_frag.c)
        "mca_btl_tcp_frag_recv: readv failed: Connection reset by peer (104)\n",
        # hydra never prints a zero exit code as a bad termination; other codes are not signals
        "=   EXIT CODE: 0\n",
        "=   EXIT CODE: 60\n",
        # the c10d client's retry warning (torch/csrc/distributed/c10d/socket.cpp), before it connects
        "[W socket.cpp:601] [c10d] The client socket has failed to connect to [localhost]:29500 "
        "(errno: 99 - Cannot assign requested address).\n",
        # torchelastic closing the rendezvous at the end of a run, and restarting a worker group it recovers
        "INFO:torch.distributed.elastic.rendezvous.dynamic_rendezvous:The node 'gpu-07_4242_0' has "
        "closed the "
        "rendezvous 'job1'.\n",
        "WARNING:torch.distributed.elastic.agent.server.api:[default] Worker group FAILED. 3/3 attempts "
        "left; "
        "will restart worker group\n",
        # elastic Horovod: a worker's exit the driver recovers from (horovod/runner/gloo_run.py, driver.py)
        "INFO:root:start worker process: gpu-08[3]\nProcess 3 exit with status code 1.\n"
        "INFO:root:wait for available slots: 2\n",
        # configuration
        "export HOROVOD_GLOO_TIMEOUT_SECONDS=60\nhorovodrun -np 4 --gloo-timeout-seconds 60 python "
        "train.py\n",
    ],
)
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


@pytest.mark.parametrize("sig_id", ADDED + EXTENDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id)
