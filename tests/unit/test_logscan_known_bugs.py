"""Known upstream bugs: from versions (what check will call) and from a crashed job's log."""

from __future__ import annotations

import io

import pytest

from ddpdoctor.diagnose import scan_stream, triage
from ddpdoctor.diagnose.kb.bugs import KNOWN_BUGS
from ddpdoctor.diagnose.known_bugs import findings_for_versions, in_range


@pytest.mark.parametrize("version,lo,hi,inside", [
    ("2.26.2", "2.26.2", "2.26.5", True), ("2.26.5", "2.26.2", "2.26.5", False),
    ("2.8.0.dev20250327+cu126", "2.8", "2.9", True), ("3.12.3", "3.12", "3.13", True),
    ("3.11.9", "3.12", "3.13", False), ("2.12.10", None, "2.13", True),
    ("2.13.0", None, "2.13", False), ("2.3", "2.3", "2.4", True), ("", "1", None, False),
])
def test_version_ranges(version, lo, hi, inside):
    assert in_range(version, lo, hi) is inside


def test_versions_alone_name_the_bug_with_link_fix_and_workaround():
    (f,) = findings_for_versions(torch="2.2.1", python="3.12.3")
    assert f.id == "KNOWN_UPSTREAM_BUG" and f.severity == "warning"
    assert f.evidence["upstream"] == "https://github.com/pytorch/pytorch/issues/125990"
    assert "2.4" in f.evidence["fixed_in"] and "3.11" in f.evidence["workaround"]
    (f,) = findings_for_versions(nccl="2.26.2")
    assert "NCCL_NVLS_ENABLE=0" in f.evidence["workaround"]


def test_versions_outside_every_range_or_unknown_give_nothing():
    assert findings_for_versions(torch="2.4.0", python="3.12.3") == []
    assert findings_for_versions(torch="2.2.1", python="3.11.4") == []
    assert findings_for_versions(nccl="2.26.5") == []
    assert findings_for_versions(torch="2.2.1") == []  # python unknown: no claim
    assert findings_for_versions() == []


def test_every_known_bug_has_a_real_upstream_link_and_a_remedy():
    for bug in KNOWN_BUGS:
        assert bug.url.startswith("https://github.com/"), bug.id
        assert bug.fixed and bug.workaround and bug.affected, bug.id


def test_log_line_of_a_known_bug_is_the_first_finding_and_an_error():
    text = ("devgpu263:589012:591652 [0] transport/nvls.cc:254 NCCL WARN Cuda failure 1 "
            "'invalid argument'\n"
            "[rank0]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/"
            "distributed/c10d/NCCLUtils.cpp:77, unhandled cuda error (run with NCCL_DEBUG=INFO "
            "for details), NCCL version 2.26.2\n")
    events, _ = scan_stream(io.BytesIO(text.encode()), "job.log")
    findings = triage(events)
    assert findings[0].id == "KNOWN_UPSTREAM_BUG" and findings[0].severity == "error"
    assert findings[0].evidence["upstream"] == "https://github.com/pytorch/pytorch/issues/150852"


def test_log_whose_printed_version_is_outside_the_range_is_not_that_bug():
    text = ("host:1:2 [0] transport/nvls.cc:254 NCCL WARN Cuda failure 1 'invalid argument'\n"
            "torch.distributed.DistBackendError: NCCL error in: x.cpp:77, unhandled cuda error "
            "(run with NCCL_DEBUG=INFO for details), NCCL version 2.27.7\n")
    events, _ = scan_stream(io.BytesIO(text.encode()), "job.log")
    findings = triage(events)
    assert findings and findings[0].id != "KNOWN_UPSTREAM_BUG"
    assert findings[0].severity == "error"


def test_every_raise_site_of_a_known_bug_matches_its_real_example():
    """A bug known by where the library raises it (kb/bugs.py RaisedIn): its recorded raise
    site and message match, and the message raised anywhere else does not."""
    from ddpdoctor.diagnose.kb.bugs import RAISED_IN

    assert RAISED_IN
    for bug in RAISED_IN:
        raised = bug.raised_in
        assert raised is not None and raised.url.startswith("https://github.com/"), bug.id
        at, exc = (part.strip() for part in raised.example.split(" | ", 1))
        assert raised.matches(at, exc), bug.id
        assert not raised.matches(at.replace(f" in {raised.function}", " in forward"), exc)
        assert not raised.matches("train.py:12 in " + raised.function, exc), bug.id
