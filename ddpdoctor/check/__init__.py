"""`ddpdoctor check`: the preflight of every rank, as one package.

- ``options``: ``CheckOptions``, every knob, validated once, sent to ranks as JSON.
- ``probe`` / ``probes/``: the ``Probe`` declaration and one module per probe (its in-rank
  ``collect``); ``analysis/``: each probe's pure ``analyze`` and the launch analysis.
- ``run``: the rank side and the one-node driver; ``assemble``: outcomes -> Report.
- ``launcher/``: N local ranks under a hard deadline; ``worker`` + ``multinode``: the
  same check inside torchrun/srun and across nodes.
- ``nvml/``: every NVML fact; ``busbw``, ``schedule``: nccl-tests arithmetic, pair rounds.

``ddpdoctor/commands/check.py`` is the click command over it.
"""
