"""Open MPI's words for an MPI call that failed (torch's MPI backend, Horovod over MPI).

Open MPI's default error handler (MPI_ERRORS_ARE_FATAL) prints a block on the rank whose
call failed and aborts every process of the communicator: the call (``*** An error
occurred in MPI_Bcast``), the error class (``*** MPI_ERR_OTHER: ...``), and before it the
transport layer's own line (``pml_ucx.c:775  Error: ucx send failed: ...``). The
scheduler's kills that follow are that abort.
"""

from __future__ import annotations

from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.kb.signature import Example, Signature

_SRC = ("https://github.com/sparticlesteve/pytorch-cuda-mpi-error/blob/"
        "3f4f8bd60e3ad600c316ee7fcecfe1f01a3a959b/slurm-422332.out")

SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "mpi.error_handler", K.MPI_ERROR, "An error occurred in MPI_",
        r"\*\*\* An error occurred in (?P<op>MPI_\w+)",
        "COMM_CONNECTIVITY", "Open MPI >= 1.x (MPI_ERRORS_ARE_FATAL)",
        (Example("[cgpu17:53890] *** An error occurred in MPI_Bcast", _SRC,
                 {"op": "MPI_Bcast"}),)),
    Signature(
        "mpi.error_class", K.MPI_ERROR, "*** MPI_ERR_",
        r"\*\*\* (?P<error_class>MPI_ERR_\w+): (?P<message>.+)",
        "COMM_CONNECTIVITY", "Open MPI >= 1.x (MPI_ERRORS_ARE_FATAL)",
        (Example("[cgpu17:53890] *** MPI_ERR_OTHER: known error not in list", _SRC,
                 {"error_class": "MPI_ERR_OTHER", "message": "known error not in list"}),)),
    Signature(
        # the point-to-point or transfer layer's own reason, printed before the block
        "mpi.transport_error", K.MPI_ERROR, ("pml_", "btl_", "mtl_"),
        r"\b(?P<layer>(?:pml|btl|mtl)_\w+)\.c:\d+\s+Error: (?P<message>.+)",
        "COMM_CONNECTIVITY", "Open MPI >= 4.0",
        (Example("[cgpu17:53890] pml_ucx.c:775  Error: ucx send failed: Input/output error",
                 _SRC, {"layer": "pml_ucx", "message": "ucx send failed: Input/output error"}),)),
)
