"""`check --ds-config FILE`: a DeepSpeed config read against itself and the job.

``load`` reads the file (JSON, no torch, no deepspeed import) into ``DsFacts``; ``rules``
is the table of constraints, each with the DeepSpeed source that states it; ``analyze``
applies the table and returns findings (DS_CONFIG_INVALID). Pure but for the file read.
"""
