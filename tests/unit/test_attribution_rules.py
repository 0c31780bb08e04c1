"""Attribution: which side of an even split is the culprit, from each kind of evidence
(Flight Recorder sequence, stacks, source rank guards, steps), and the combiner. Pure,
no processes: real py-spy stacks and FR dumps recorded from tests/fixtures/userjobs/ and
tests/fixtures/hangs/, plus small synthetic stacks for the rules' edges."""

from __future__ import annotations

import glob
import os
import re
from types import MappingProxyType

import pytest
from attach_helpers import C10D, LOGGER, RECORDED, TORCH, TRAIN, f, in_collective, rank, thread

from ddpdoctor.attach.analyze import analyze, analyze_evidence, headline
from ddpdoctor.attach.attribution import Strength, attribute, by_steps, stack_role
from ddpdoctor.attach.classify import classify
from ddpdoctor.attach.evidence import HangEvidence, collect_evidence, of_states
from ddpdoctor.attach.flight_recorder import compare_traces, parse_fr_trace
from ddpdoctor.attach.fr_sequence import MISSING, PARAM_ORDER, compare_sequences, period_of
from ddpdoctor.attach.guards import find_guard, guard_at
from ddpdoctor.attach.stacks import STOPPED, RankStack, parse_py_spy_json, with_source

USERJOBS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "userjobs")


def ids(findings):
    return [(x.id, x.ranks) for x in findings]


# -- source: rank guards ------------------------------------------------------------

GUARDED = '''\
import torch.distributed as dist

def train(rank, accelerator, trainer, args):
    for step in range(10):
        loss = step_fn()
        if rank == 0:
            save()
        if dist.get_rank() == 0 and step % 10 == 0:
            log()
        if accelerator.is_main_process:
            gather()
        if self.trainer.is_global_zero:
            self.all_gather(loss)
        if args.local_rank != 0:
            pass
        else:
            consolidate()
        if step % 2 == 0:
            evaluate()

@rank_zero_only
def report():
    print("x")
'''


@pytest.mark.parametrize("line,guard_line,text", [
    (7, 6, "rank == 0"),
    (9, 8, "dist.get_rank() == 0 and step % 10 == 0"),
    (11, 10, "accelerator.is_main_process"),
    (13, 12, "self.trainer.is_global_zero"),
    (17, 14, "not (args.local_rank != 0)"),
    (23, 22, "@rank_zero_only"),
])
def test_guard_spellings(line, guard_line, text):
    assert guard_at(GUARDED, line) == (guard_line, text)


@pytest.mark.parametrize("line", [5, 19, 2])
def test_no_guard_outside_rank_conditions(line):
    assert guard_at(GUARDED, line) is None


@pytest.mark.parametrize("cond", ["args.local_rank != -1", "args.local_rank == -1",
                                  "rank is not None", "rank is None", "rank >= 0",
                                  "-1 != local_rank"])
def test_running_distributed_sentinels_are_not_guards(cond):
    # true (or false) on every rank alike: a collective under it is called by all ranks
    src = f"if {cond}:\n    dist.all_reduce(t)\n"
    assert guard_at(src, 2) is None


def test_flags_computed_from_a_rank_are_guards_devices_are_not():
    src = ("culprit = rank == args.culprit\n"
           "device = torch.device(f'cuda:{local_rank}')\n"
           "if culprit and args.fault == 'mismatch':\n"
           "    dist.broadcast(y, src=0)\n"
           "if device.type == 'cuda':\n"
           "    torch.cuda.synchronize()\n")
    assert guard_at(src, 4) == (3, "culprit and args.fault == 'mismatch'")
    assert guard_at(src, 6) is None


def test_find_guard_reads_the_file_and_skips_library_frames(tmp_path):
    src = tmp_path / "train.py"
    src.write_text(GUARDED)
    frames = [f("all_gather", C10D, 3000), f("wrapper", LOGGER, 83),
              f("train", str(src), 13), f("<module>", str(src), 30)]
    g = find_guard(frames)
    assert (g.line, g.text, g.frame.line) == (12, "self.trainer.is_global_zero", 13)
    assert "runs under `if self.trainer.is_global_zero` at train.py:12" in g.describe()
    assert find_guard([f("x", str(tmp_path / "gone.py"), 3)]) is None  # unreadable: none
    assert guard_at("def broken(:\n", 1) is None  # a syntax error is no guard


# -- Flight Recorder: the regular sequence ------------------------------------------

def test_period_of_a_step_sequence_after_a_warm_up():
    assert period_of(["bcast", "ar1", "ar2", "ar1", "ar2", "ar1", "ar2"]) == 2
    # two repetitions after a longer first step (ZeRO's first step broadcasts more)
    assert period_of(["ar", "b1", "b2", "x", "ar", "b1", "b2", "ar", "b1", "b2"]) == 3
    assert period_of(["a", "b", "c"]) == 0


def _traces(name):
    out = {}
    for path in glob.glob(os.path.join(RECORDED, name, "ddpdoctor-fr-rank*.json")):
        r = int(re.search(r"rank(\d+)", path).group(1))
        with open(path, "rb") as fh:
            out[r] = parse_fr_trace(fh.read(), r)
    return out


def test_parameter_order_from_real_dumps():
    # hand-written all-reduce; at step 4 rank 1 swaps two weights ([16,8] <-> [8,16])
    traces = _traces("param-order-2ranks")
    [v] = compare_sequences(traces)
    assert (v.kind, v.culprits, v.period) == (PARAM_ORDER, (1,), 4)
    assert v.expected == "all_reduce [[16, 8]]" and v.got == {1: "all_reduce [[8, 16]]"}
    # both ranks wait in the same all_reduce line: the stacks alone see nothing odd
    st = [classify(rank(r, thread(in_collective("all_reduce", 40, "sync_grads"))))
          for r in (0, 1)]
    assert analyze(st) == []
    ev = HangEvidence(tuple(st), tuple(compare_traces(traces)), tuple(compare_sequences(traces)),
                      has_flight_recorder=True)
    [found] = analyze_evidence(ev)
    assert (found.id, found.ranks) == ("HANG_COLLECTIVE_MISMATCH", [1])
    assert "parameter order" in found.title
    assert found.evidence["attribution"]["decided by"] == "flight recorder (decisive)"


def _trace(r, keys):
    from ddpdoctor.attach.flight_recorder import FrEntry, FrTrace

    t = FrTrace(r)
    for seq, (op, sizes) in enumerate(keys, start=1):
        t.entries.append(FrEntry("0", seq, op, input_sizes=sizes))
        t.last_enqueued["0"] = seq
    return t


STEP = [("all_reduce", ((10,),)), ("all_reduce", ((20,),))]


def test_the_rank_that_leaves_the_sequence_is_the_culprit():
    from ddpdoctor.attach.fr_sequence import BREAKS

    # rank 0 calls an extra broadcast (a rank-guarded checkpoint) where the step's first
    # all-reduce belongs; rank 1 enqueued just that all-reduce
    traces = {0: _trace(0, STEP * 3 + [("broadcast", ((1,),))]),
              1: _trace(1, STEP * 3 + STEP[:1])}
    [v] = compare_sequences(traces)
    assert (v.kind, v.culprits, v.period, v.seq) == (BREAKS, (0,), 2, 7)
    assert v.expected == "all_reduce [[10]]" and v.got == {0: "broadcast [[1]]"}
    # the other rank enqueued nothing yet (busy elsewhere): rank 0's extra call still is
    traces[1] = _trace(1, STEP * 3)
    [v] = compare_sequences(traces)
    assert (v.kind, v.culprits) == (BREAKS, (0,))
    # rank 0 went on with the sequence, rank 1 did not: rank 1 is missing a call
    traces = {0: _trace(0, STEP * 3 + STEP), 1: _trace(1, STEP * 3)}
    [v] = compare_sequences(traces)
    assert (v.kind, v.culprits) == (MISSING, (1,))
    # both in step: nothing to say
    assert compare_sequences({0: _trace(0, STEP * 3), 1: _trace(1, STEP * 3)}) == []


def test_heartbeat_steps_feed_the_steps_rule(tmp_path):
    from ddpdoctor.attach.evidence import read_heartbeat_steps

    (tmp_path / "rank0.json").write_text('{"rank": 0, "step": 41, "status": "running"}')
    (tmp_path / "rank1.json").write_text('{"rank": 1, "step": 40, "status": "running"}')
    (tmp_path / "rank2.json").write_text("not json")
    dirs = {0: str(tmp_path), 1: str(tmp_path), 2: str(tmp_path), 3: str(tmp_path)}
    assert read_heartbeat_steps(dirs) == {0: 41, 1: 40}
    st = [_st(0, in_collective("all_reduce", 88)), _st(1, in_collective("broadcast", 90))]
    ev = collect_evidence(st, heartbeat_dirs={0: str(tmp_path), 1: str(tmp_path)})
    [found] = analyze_evidence(ev)
    assert found.ranks == [1]
    assert found.evidence["attribution"]["decided by"] == "steps (weak)"


def test_real_zero_checkpoint_hang_left_the_sequence():
    # DDP + ZeRO under the watch bootstrap (DDPDOCTOR_FR_DIR): each step is one bucket
    # all-reduce and ZeRO's 4 parameter broadcasts (the first step has 2 more); at step 3
    # rank 0 calls consolidate_state_dict under `if rank == 0` (a broadcast [[1]])
    from ddpdoctor.attach.fr_sequence import BREAKS

    traces = _traces("zero-checkpoint-2ranks")
    [v] = compare_sequences(traces)
    assert (v.kind, v.culprits, v.period, v.seq) == (BREAKS, (0,), 5, 21)
    assert v.expected == "all_reduce [[676]]" and v.got == {0: "broadcast [[1]]"}
    st = _userjob_states("zero-checkpoint-2ranks")
    ev = collect_evidence(st, compare_traces(traces), traces)
    [found] = analyze_evidence(ev)
    assert (found.id, found.ranks) == ("HANG_COLLECTIVE_MISMATCH", [0])
    assert found.evidence["attribution"]["decided by"] == (
        "flight recorder (decisive) + stacks (strong) + source (strong)")


def test_missing_collective_from_real_dumps():
    [v] = compare_sequences(_traces("missing-3ranks"))
    assert (v.kind, v.culprits) == (MISSING, (1,))


# -- stacks: the usual collective vs the odd one ------------------------------------

DDP_BACKWARD = [f("_engine_run_backward", f"{TORCH}/autograd/graph.py", 829),
                f("backward", f"{TORCH}/autograd/__init__.py", 347),
                f("Tensor.backward", f"{TORCH}/_tensor.py", 581), f("main", TRAIN, 36)]
FSDP_GATHER = [f("all_gather_single", C10D, 4011),
               f("foreach_all_gather", f"{TORCH}/distributed/fsdp/_fully_shard/"
                 "_fsdp_collectives.py", 244), f("main", TRAIN, 43)]


def _st(r, frames, **kw):
    return classify(rank(r, thread(frames, **kw)))


def test_stack_roles():
    assert stack_role(_st(0, DDP_BACKWARD))[0] == -1
    assert stack_role(_st(0, FSDP_GATHER))[0] == -1
    assert stack_role(_st(0, in_collective("barrier", 48, "main")))[0] == 1
    assert stack_role(_st(0, in_collective("broadcast", 20, "save_checkpoint")))[0] == 1
    assert stack_role(_st(0, in_collective("all_reduce", 88, "step")))[0] == 0


def test_stacks_decide_a_one_against_one_split():
    st = [_st(0, FSDP_GATHER), _st(1, in_collective("barrier", 48, "main"))]
    [found] = analyze(st)
    assert ids([found]) == [("HANG_COLLECTIVE_MISMATCH", [1])]
    assert found.title.startswith("rank 0 waits in all_gather_single")
    assert found.evidence["attribution"]["decided by"] == "stacks (strong)"


def test_conflicting_strong_evidence_is_undecided():
    # stacks: rank 1 is in an evaluation function while rank 0 is in DDP's backward;
    # source: yet rank 0's frame runs under a rank guard. Two strong votes disagree.
    from ddpdoctor.attach.guards import RankGuard

    st = [_st(0, DDP_BACKWARD), _st(1, in_collective("broadcast", 140, "evaluate"))]
    g = RankGuard(TRAIN, 35, "rank == 0", st[0].site)
    ev = HangEvidence(tuple(st), guards=MappingProxyType({0: g}))
    att = attribute(ev, [[0], [1]])
    assert not att.decided and att.culprits == (0, 1)
    assert "the evidence conflicts" in att.look_at and "innermost user frame" in att.look_at
    [found] = analyze_evidence(ev)
    assert found.ranks == [0, 1] and "undecided" in found.title
    # a weaker vote does not overrule a stronger one: the source decides over weak stacks
    weak = [_st(0, in_collective("all_reduce", 88, "step")), st[1]]
    att = attribute(HangEvidence(tuple(weak), guards=MappingProxyType({0: g})), [[0], [1]])
    assert att.decided and att.culprits == (0,) and att.decided_by == "source (strong)"


# -- steps ----------------------------------------------------------------------------

def test_steps_name_the_rank_that_skipped():
    st = [_st(r, in_collective("all_reduce", 88)) for r in range(3)]
    ev = HangEvidence(tuple(st), steps=MappingProxyType({0: 41, 1: 40, 2: 41}))
    v = by_steps(ev, [[0, 2], [1]])
    assert v.culprits == {1} and v.strength == Strength.STRONG
    two = HangEvidence(tuple(st[:2]), steps=MappingProxyType({0: 41, 1: 40}))
    assert by_steps(two, [[0], [1]]).strength == Strength.WEAK
    same = HangEvidence(tuple(st[:2]), steps=MappingProxyType({0: 40, 1: 40}))
    assert by_steps(same, [[0], [1]]) is None


# -- a stopped rank is never healthy --------------------------------------------------

def test_stopped_rank_while_the_other_sleeps_is_a_finding():
    sleeping = [f("wait_for_checkpoint", TRAIN, 61, "time.sleep(3600)"), f("main", TRAIN, 9)]
    st = [classify(RankStack(0, 7, STOPPED, error="the process is stopped")),
          _st(1, sleeping)]
    found = analyze(st)
    assert ids(found) == [("HANG_RANK_MISSING_COLLECTIVE", [0])]
    assert "stopped" in found[0].title and "kill -CONT" in found[0].evidence["why"]
    assert headline(st, found) == found[0].title


# -- real stacks of the user jobs (tests/fixtures/userjobs/record.sh) ------------------

def _userjob_states(name):
    """Recorded py-spy stacks, the user script's frames pointed at this checkout."""
    states = []
    for path in sorted(glob.glob(os.path.join(RECORDED, name, "pyspy-rank*.json"))):
        r = int(re.search(r"rank(\d+)", path).group(1))
        with open(path) as fh:
            threads = parse_py_spy_json(fh.read())
        for t in threads:
            t.frames = [type(fr)(fr.name, _here(fr.filename), fr.line) for fr in t.frames]
        states.append(classify(RankStack(r, 100 + r, "sleeping", with_source(threads))))
    assert states, name
    return states


def _here(filename):
    if "/tests/fixtures/userjobs/" in filename:
        return os.path.join(USERJOBS, os.path.basename(filename))
    return filename


@pytest.mark.parametrize("name,culprit,rules,guard", [
    ("zero-checkpoint-2ranks", 0, {"stacks", "source"}, "rank == 0"),
    ("lightning-hook-2ranks", 0, {"stacks", "source"}, "is_global_zero"),
    ("accelerate-metrics-2ranks", 0, {"stacks", "source"}, "is_main_process"),
    ("fsdp2-skip-2ranks", 1, {"stacks"}, None),
])
def test_recorded_user_jobs_name_exactly_the_culprit(name, culprit, rules, guard):
    st = _userjob_states(name)
    ev = collect_evidence(st)
    [found] = analyze_evidence(ev)
    assert (found.id, found.ranks) == ("HANG_COLLECTIVE_MISMATCH", [culprit])
    att = found.evidence["attribution"]
    assert att["decided"] is True
    assert {v.split(" (")[0] for v in att["votes"]} == rules
    if guard:
        assert guard in found.evidence["rank guard"][0]
        assert f"rank {culprit} waits in" in found.title and ", under `if " in found.title
    else:
        assert "rank guard" not in found.evidence
    assert of_states(st).guards == {}  # stacks only: no file read
