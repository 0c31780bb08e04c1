"""Pure: a rank that burns CPU while its peers wait in a collective: working, or spinning?

CPU use alone does not prove work. A rank that busy-waits (``while not
os.path.exists(flag): pass``, a counter that never reaches its target, a loop waiting for
a deadline far in the future, a GPU rank's host thread spinning on a stuck kernel) burns a
core and never reaches the collective its peers wait in. What tells it from a rank that
works (an evaluation, a checkpoint save, a long compile) is where it is: its stack, read
several times over a few seconds. A working rank moves: through its model's layers,
through the library calls of a save or a compile, on to the next step. A spinning one
stays on the same lines of the same function, called from the same place.

The rule (``spin_verdict``), on the main thread's stacks read over the look and its
recheck, with no step or output meanwhile (the caller checks that), and its peers
waiting in a collective (the caller's premise):

- every read found the rank in user code, never inside a collective, p2p op or data
  loading (it would have moved on);
- the caller chain (every user frame but the innermost, with its line) never changed;
- the innermost user frame stayed in one function, on at most ``MAX_LOOP_LINES`` lines
  (a tight loop: ``while cond: pass``, or a condition and a one-line body);
- the library calls below it were at most ``MAX_INNER_CALLS`` distinct chains (none, or
  the one helper a poll loop calls: ``os.path.exists``);
- at least ``MIN_SAMPLES`` reads spanning ``MIN_SPAN_S`` seconds;
- in most reads the loop ran Python: the main thread held the GIL, or it was inside
  Python's own file-system helpers (``os.path.exists``'s ``stat``, pathlib). A read that
  finds it inside a call that released the GIL, called straight from its frame or through
  any other Python (a torch op, ``nn.Linear.forward``'s matmul; a ``Future.result()`` or
  ``Thread.join()`` waiting on a thread that works), is a ``native`` read: a tight
  ``x = torch.tanh(x @ w)`` evaluation loop stays on the same
  two lines, like a spin, but spends nearly every read in torch's kernels with the GIL
  released (measured: 19 of 20 reads), and so does a model's forward whose two heavy
  layers the reads all land on (37 of 40 reads alone, 35 of 40 beside five busy loops on
  2 cores; before the layer's own Python frame counted, a CI run starved to 13% of a
  core called it spinning and stopped the job), while a Python busy loop holds the GIL
  (``n += 1``, ``time.time() < deadline``: 20 of 20) or polls a file-system helper
  (``os.path.exists``: its frame in nearly every read). More than ``MAX_NATIVE_SHARE``
  of native reads: not known to spin (a rank spinning inside one native call that
  released the GIL, such as a GPU host thread in ``.item()`` on a stuck kernel, is not
  named by this rule: better a missed spin than a stopped evaluation).
- its lines are not in a ``for`` loop (or a comprehension) of its source, where the caller
  could read it (run/loops.py): a tight loop through data (``for w in words: counts[w] =
  counts.get(w, 0) + 1``, rank 0 building a vocabulary while the others wait in a
  barrier) looks like a poll in every read, GIL held and no call below; a ``for`` loop
  ends with its iterable, a ``while`` loop re-tests its condition. A ``for`` loop that
  polls (``for _ in itertools.count():``) is missed: better a missed spin than a stopped
  job.

Then the rank spins: it is the culprit, whatever its CPU says. Storage I/O still proves
work (the caller checks it first): a spin loop writes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ddpdoctor.attach.classify import COMPUTE, IDLE, classify, is_library, is_poll_helper
from ddpdoctor.attach.stacks import RankStack, ThreadStack
from ddpdoctor.run.loops import Loop

# (file, function, the lines the reads found) -> the innermost loop around them, its line
LoopOf = Callable[[str, str, tuple[int, ...]], "tuple[Loop, int] | None"]

# A working rank's stack moves, but a read can miss the motion: an evaluation spends
# ~80% of its time inside its model's forward, whose few lines a handful of reads may
# all land on (measured: 5 reads over 1.5 s named a 25 s evaluation "spinning on lines
# 43/44/45 of forward"). Many reads, and at most 2 lines, make that miss rare: 0.8^15
# for "never outside forward", times ~3 x (2/3)^15 for "on 2 of its 3 lines".
MIN_SAMPLES = 6
MIN_SPAN_S = 0.5
MAX_LOOP_LINES = 2  # ``while cond:`` / its one-line body
MAX_INNER_CALLS = 2  # none, and the helper the loop polls (os.path.exists)
# of the reads: above it, the time goes to native work (a kernel). Measured here with
# run/stack_reads.py's 3 s window: the tight torch loop 19 of 20 reads idle, 9 of 15 and
# 11 of 17 on a host loaded past its 2 cores (and below half once in CI: a healthy job
# stopped at 0.5); Python busy-waits (a deadline, a counter, os.path.exists) 0 of 9 to 14,
# loaded or not
MAX_NATIVE_SHARE = 0.25
_IN_PLACE = (COMPUTE, IDLE)  # kinds a spinning rank shows; any other means it moved on


@dataclass(frozen=True)
class Spot:
    filename: str
    name: str
    line: int

    def __str__(self) -> str:
        return f"{os.path.basename(self.filename)}:{self.line} in {self.name.rsplit('.', 1)[-1]}"


@dataclass(frozen=True)
class StackSample:
    """One read of a rank's stack: where its main thread was."""

    at: float  # monotonic seconds
    kind: str  # attach.classify's kind for the whole rank ("collective", "compute", ...)
    user: tuple[Spot, ...] = ()  # the main thread's user-code frames, innermost first
    inner: tuple[tuple[str, str], ...] = ()  # library (file, function) inside user[0]
    error: str = ""  # why the stack could not be read
    # inside a native call that released the GIL, not below a file-system helper (os.path)
    native: bool = False


@dataclass(frozen=True)
class SpinVerdict:
    spinning: bool
    reason: str  # one phrase: where it spins, or why it is not known to
    where: str = ""  # "spin_job.py:67 in spin_on_flag" when spinning


def _main_thread(stack: RankStack) -> ThreadStack | None:
    for t in stack.threads:
        if t.is_main:
            return t
    return stack.threads[0] if stack.threads else None


def sample_of(stack: RankStack, at: float) -> StackSample:
    """The evidence of one stack read (attach's RankStack) for ``spin_verdict``."""
    if not stack.threads:
        return StackSample(at, classify(stack).kind, error=stack.error or "no stack")
    kind = classify(stack).kind
    main = _main_thread(stack)
    # `run --native` reads C frames too: never the user's lines (the same place in Python)
    frames = [f for f in main.frames if not f.native] if main is not None else []
    first_user = next((i for i, f in enumerate(frames) if not is_library(f.filename)), -1)
    if first_user < 0:
        return StackSample(at, kind)
    user = tuple(Spot(f.filename, f.name, f.line) for f in frames[first_user:]
                 if not is_library(f.filename))
    inner = tuple((f.filename, f.name) for f in frames[:first_user])
    # the GIL released below a torch layer's Python is its kernel; below os.path's, a poll
    native = (main is not None and not main.owns_gil
              and not (inner and is_poll_helper(inner[-1][0])))
    return StackSample(at, kind, user, inner, native=native)


def _moved(samples: list[StackSample]) -> str:
    """Why these reads show a rank that moves ("" when it stayed in place)."""
    callers = {s.user[1:] for s in samples}
    if len(callers) > 1:
        return "its callers changed between reads"
    places = {(s.user[0].filename, s.user[0].name) for s in samples}
    if len(places) > 1:
        names = sorted({str(s.user[0]) for s in samples})
        return f"it moved through {len(places)} functions ({', '.join(names[:3])})"
    lines = {s.user[0].line for s in samples}
    if len(lines) > MAX_LOOP_LINES:
        return f"it moved through {len(lines)} lines of {samples[0].user[0].name}"
    inner = {s.inner for s in samples}
    if len(inner) > MAX_INNER_CALLS:
        return f"its library calls changed ({len(inner)} different ones)"
    return ""


def spin_verdict(samples: list[StackSample], loop_of: LoopOf | None = None) -> SpinVerdict:
    """Does this rank spin in place? ``samples``: its stack reads, oldest first;
    ``loop_of``: the loop of its source around some lines (None: its source unknown)."""
    read = [s for s in samples if not s.error]
    if len(read) < MIN_SAMPLES:
        why = next((s.error for s in samples if s.error), "")
        return SpinVerdict(False, f"only {len(read)} of its stacks could be read"
                           + (f" ({why})" if why else ""))
    for s in read:
        if s.kind not in _IN_PLACE:
            return SpinVerdict(False, f"a read found it {s.kind} (it moved on)")
        if not s.user:
            return SpinVerdict(False, "its main thread was in library code only")
    span = read[-1].at - read[0].at
    if span < MIN_SPAN_S:
        return SpinVerdict(False, f"its stacks span only {span:.1f} s")
    moved = _moved(read)
    if moved:
        return SpinVerdict(False, moved)
    native = sum(1 for s in read if s.native)
    if native > MAX_NATIVE_SHARE * len(read):
        return SpinVerdict(False, f"{native} of its {len(read)} stacks found it inside a "
                           "native call with the GIL released (a torch op, a kernel): "
                           "native work, not a Python spin")
    lines = sorted({s.user[0].line for s in read})
    top = read[0].user[0]
    loop = loop_of(top.filename, top.name, tuple(lines)) if loop_of is not None else None
    if loop is not None and loop[0] is Loop.FOR:
        return SpinVerdict(False, f"its {len(read)} stacks stayed in a `for` loop "
                           f"({os.path.basename(top.filename)}:{loop[1]}): it steps "
                           "through data, not polling a condition")
    where = str(top) if len(lines) == 1 else \
        f"{os.path.basename(top.filename)}:{'/'.join(map(str, lines))} in " \
        f"{top.name.rsplit('.', 1)[-1]}"
    return SpinVerdict(True, f"spins at {where}: the same place in {len(read)} stacks "
                       f"over {span:.1f} s", where)
