"""Hang judgement shared by the modes that stop or name a hung job: ``verdict`` decides,
from a look's classified stacks and the ranks found working, whether a quiet job is hung
(run on one node, the job view's leader across nodes). Pure; imports only ``core``."""
