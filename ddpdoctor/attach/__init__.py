"""Hang diagnosis: find every rank, dump its stack, classify it, name the culprit.

``diagnose_hang`` (in ``diagnosis``) is the entry point that ``ddpdoctor attach`` and
``ddpdoctor run`` share. Nothing here imports torch.
"""
