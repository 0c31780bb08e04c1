"""The reference trainer behind ``ddpdoctor train``: a small GPT trained with DDP, FSDP2,
ZeRO, pipeline or tensor parallelism, and a catalogue of faults it can plant on purpose.

The per-rank entry point is ``python -m ddpdoctor.train`` (under torchrun or srun).
Importing this package does not import torch; its modules do.
"""
