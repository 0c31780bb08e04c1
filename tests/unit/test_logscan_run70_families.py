"""Blind run 70's lesson (batches X97, X98 and X99), a family:

- CUDA's invalid-device error (cudaErrorInvalidDevice, 101) in NCCL's words, `NCCL WARN
  Cuda failure 101 'invalid device ordinal'` (raised in its P2P transport), is the same
  device-mapping fault as torch's `CUDA error: invalid device ordinal` and nccl-tests'
  `Test CUDA failure ... invalid device ordinal`: `GPU_DEVICE_MAPPING`, fix the config
  (ranks placed on a node that does not have their GPUs). It was read as the crash of the
  rank whose traceback followed.

The real log's URL is in its sidecar."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

from ddpdoctor.core.next_step import Action, decide

DIR = Path("tests/fixtures/reallogs")


def test_nccls_invalid_device_ordinal_is_a_device_mapping_fault():
    found = findings_of(DIR / "X99_invalid_device_ordinal_8gpus_one_node_slurm.log")
    assert found[0].id == "GPU_DEVICE_MAPPING"
    assert "invalid device ordinal" in found[0].title
    assert decide(found).action is Action.FIX_CONFIG


def test_every_raisers_wording_is_the_same_fault(tmp_path):
    for line in ("node1:12:34 [0] transport/p2p.cc:275 NCCL WARN Cuda failure 101 'invalid "
                 "device ordinal'",
                 "node1:12:34 [0] NCCL WARN Cuda failure 'invalid device ordinal'",
                 "RuntimeError: CUDA error: invalid device ordinal"):
        assert findings_in(tmp_path, line + "\n")[0].id == "GPU_DEVICE_MAPPING", line
    # another CUDA failure in NCCL's words is not this one
    other = "node1:12:34 [0] NCCL WARN Cuda failure 'out of memory'\n"
    assert "GPU_DEVICE_MAPPING" not in [f.id for f in findings_in(tmp_path, other)]
