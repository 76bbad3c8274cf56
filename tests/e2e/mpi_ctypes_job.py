"""A real MPI program without a compiler: Open MPI 4's libmpi.so.40 called through ctypes.

MPI_Init, an MPI_Allreduce and an MPI_Barrier over MPI_COMM_WORLD, MPI_Finalize; with MPI_JOB_ABORT=<rank>
that rank calls MPI_Abort(MPI_COMM_WORLD, 7) after the collectives. Used by tests/e2e/test_real_mpi_logs.py
so that verbose transport settings (btl/pml/coll) print what they print in a real MPI job.
"""

from __future__ import annotations

import ctypes
import os

lib = ctypes.CDLL("libmpi.so.40", mode=ctypes.RTLD_GLOBAL)


def handle(symbol: str) -> ctypes.c_void_p:
    """Open MPI's predefined handles (MPI_COMM_WORLD, MPI_INT, MPI_SUM) are addresses of global objects."""
    return ctypes.c_void_p(ctypes.addressof(ctypes.c_char.in_dll(lib, symbol)))


WORLD, INT, SUM = handle("ompi_mpi_comm_world"), handle("ompi_mpi_int"), handle("ompi_mpi_op_sum")

assert lib.MPI_Init(None, None) == 0
rank, size = ctypes.c_int(), ctypes.c_int()
lib.MPI_Comm_rank(WORLD, ctypes.byref(rank))
lib.MPI_Comm_size(WORLD, ctypes.byref(size))
src, dst = ctypes.c_int(rank.value + 1), ctypes.c_int()
assert lib.MPI_Allreduce(ctypes.byref(src), ctypes.byref(dst), 1, INT, SUM, WORLD) == 0
assert lib.MPI_Barrier(WORLD) == 0
print(f"rank {rank.value}/{size.value} allreduce {dst.value}", flush=True)
if os.environ.get("MPI_JOB_ABORT") == str(rank.value):
    lib.MPI_Abort(WORLD, 7)
assert lib.MPI_Finalize() == 0
