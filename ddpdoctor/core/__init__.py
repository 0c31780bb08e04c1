"""The core layer: what every mode shares, at the bottom of the package.

Findings and their catalog, the report and its next step, the one output path and the
errors a command ends with, the names two processes agree on (``contract``), and the small
utilities (redaction, safe files, process trees, signal and thread names, playbooks, the
terminal view). Core imports nothing of the modes above it (tests/unit/test_layers.py).
"""
