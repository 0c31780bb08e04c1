"""Horovod's own words for a collective that some ranks never joined, and for its shutdown.

Horovod's stall inspector (horovod/common/stall_inspector.cc) lists every tensor that some
ranks submitted and others did not, after 60 s: "NAME [ready ranks: 0, 1, 3]". The ranks
absent from every list are the ones that never got there; lists that differ from tensor
to tensor mean the ranks submitted different tensors.
"""

from __future__ import annotations

from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.kb.signature import Example, Signature, ints

SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "horovod.stalled_op", K.HOROVOD_STALL, "[ready ranks:",
        # (?<!\S): tried where a word starts, not at each offset of a long one
        r"(?<!\S)(?P<op>\S+) \[ready ranks: (?P<ready_ranks>\d+(?:, ?\d+)*)\]",
        "HANG_RANK_MISSING_COLLECTIVE", "horovod >= 0.13 (the stall inspector)",
        (Example("HorovodBroadcast_InceptionV3_AuxLogits_Conv2d_2a_5x5_weights_0 [ready ranks: "
                 "5, 6, 3, 1, 4, 0], ", "https://github.com/horovod/horovod/issues/530",
                 {"op": "HorovodBroadcast_InceptionV3_AuxLogits_Conv2d_2a_5x5_weights_0",
                  "ready_ranks": [5, 6, 3, 1, 4, 0]}),
         Example("model/model/DistributedAdamOptimizer_Allreduce/HorovodAllreduce_model_model_"
                 "gradients_AddN_58_0 [ready ranks: 1], ",
                 "https://github.com/horovod/horovod/issues/100",
                 {"ready_ranks": [1]})),
        convert={"ready_ranks": ints}),
    # what every other rank raises once one rank's exception (or exit) shut Horovod down:
    # the fallout of that rank's failure, as an aborted NCCL communicator is
    Signature(
        "horovod.shut_down", K.NCCL_ABORTED, "Horovod has been shut down",
        r"Horovod has been shut down\. This was caused by an exception on one of the ranks",
        "RANK_CRASHED", "horovod >= 0.16",
        (Example("[1,1]<stderr>:RuntimeError: Horovod has been shut down. This was caused by an "
                 "exception on one of the ranks or an attempt to allreduce, allgather or "
                 "broadcast a tensor after one of the ranks finished execution.",
                 "https://github.com/ChenRocks/UNITER/issues/31"),)),
)
