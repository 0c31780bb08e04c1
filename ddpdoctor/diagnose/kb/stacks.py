"""A py-spy dump's thread header: the sign that a log holds stacks of a hung job.

The header alone says nothing went wrong; diagnose reads the file again for the dump's
frames (diagnose/stackdump.py) and compares where each dumped process was.
"""

from __future__ import annotations

from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.kb.signature import Example, Signature
from ddpdoctor.diagnose.stackdump import HEADER

SIGNATURES = (
    Signature(
        "pyspy.thread_header", K.STACK_HEADER, ('): "',),
        HEADER.pattern.lstrip("^"),
        "HANG_RANK_MISSING_COLLECTIVE", "py-spy >= 0.3 (`py-spy dump`)",
        (Example('Thread 0x7FA6E7C01740 (idle): "MainThread"',
                 "https://github.com/facebookresearch/fairseq/issues/4816",
                 {"tid": "0x7FA6E7C01740", "state": "idle", "name": "MainThread"}),
         Example('Thread 280064 (active): "MainThread"',
                 "https://github.com/huggingface/m4-logs/blob/master/tr_141-hanging/"
                 "tr_141_cm409xPMD01_scale_leap_of_faith_v5_num_workers_0-try3/README.md",
                 {"tid": "280064", "state": "active"}))),
)
