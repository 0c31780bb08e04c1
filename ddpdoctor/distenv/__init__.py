"""The distributed environment variables: what NCCL, torch and gloo really read
(``table.py``: every entry with its source) and the judgement of a set of ranks' values
(``judge.py``: names that nothing reads, renamed and obsolete ones, values ignored or
misread, settings contradicting the host). A library: ``check`` judges the environment its
probes gather, ``run`` the environment it reads from the job's ranks."""
