"""The package is layered one way (issue #28): core <- libraries <- modes <- commands and
the CLI.

An ast walk over ``ddpdoctor/`` (no imports, no processes) builds the file-level import
graph: every ``import``/``from ... import`` at module level, inside functions (lazy) and
under ``if TYPE_CHECKING``, plus ``importlib.import_module("ddpdoctor....")`` with a constant
name. Then:

- core imports nothing above it; a library imports only core and libraries; no mode
  imports ``ddpdoctor.commands`` or the CLI;
- a mode imports another mode only where ``ALLOWED`` records today's edge with its reason;
- no file-level import cycle, and no package-level cycle beyond ``ALLOWED_PACKAGE_CYCLES``.

``ALLOWED`` can only shrink: an entry whose import is gone fails the test until it is
deleted, so a fixed violation cannot quietly come back. The checker itself is tested on
planted graphs built in memory (a back-import, a lazy cycle, a mode reaching into commands).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "ddpdoctor"

# The layers, lowest first. A module's layer is its top-level name under ddpdoctor/.
# core: the pipeline every mode shares (findings, report, catalog, views of a report) and the
# small utilities (redaction, safe files, process trees, signal and thread names). The
# package root (``ddpdoctor/__init__.py``: __version__, the lazy ``ddpdoctor.watch``) is core.
CORE = ("", "core")
# libraries and modes: one package per mode or shared library; check_worker.py is the
# documented ``-m ddpdoctor.check_worker`` shim of check.
# libraries: knowledge and machinery several modes share, named for the thing; they import
# core only (and each other), never a mode.
LIBRARIES = ("distenv", "hang", "nvml")
MODES = ("attach", "check", "diagnose", "run", "watch", "jobview", "plan", "scale",
         "train", "integrations", "report")
MODE_ALIASES = {"check_worker": "check"}
# the command line: may import anything below it.
ENTRY = ("commands", "cli", "__main__")

# Why each reason is allowed today; the redesign (a shared hang/ library, typed
# contracts, views apart from modes) removes them one by one.
_HANG = "run's hang look reads and classifies stacks with attach's code (to a shared hang/)"
_JOB_HANG = ("the job view and diagnose (py-spy dumps in a log) judge hangs with attach's stack "
             "analysis (to a shared hang/)")
_JOB_RUN = "run hosts the job view on its node (jobview is half of run)"
_WATCH_FILE = "run/report read the watch's events file (to a typed contract record)"
_FR = "the Flight Recorder dump's names and parser live in attach (to a contract record)"
_SIZES = "the trainer's --size presets are plan's model of the reference GPT"
_SCALE_TRAIN = "scale launches the reference trainer with its options and injections"
_TRIAGE = "run and scale triage a job's output with diagnose's log rules"
_SINK = "framework callbacks are watch() sinks"
_MEMORY = "the trainer and the watch report memory with plan's model"
ALLOWED: dict[tuple[str, str], str] = {
    ("", "watch"): "the public lazy export ddpdoctor.watch(...)",
    ("", "watch.events"): "the public lazy export ddpdoctor.DDPDoctorWarning",
    ("check.analysis.env", "diagnose.known_bugs"): "check and diagnose share the known-bug "
                                                  "table (to a kb/ library)",
    ("diagnose.stackdump", "attach.classify"): _JOB_HANG,
    ("diagnose.stackdump", "attach.stacks"): _JOB_HANG,
    ("report.series", "attach.flight_recorder"): _FR,
    ("report.sources", "run.watch_events"): _WATCH_FILE,
    ("report.train_report", "run.watch_events"): _WATCH_FILE,
    ("integrations.common", "watch.api"): _SINK,
    ("integrations.common", "watch.stream"): _SINK,
    ("jobview.merge", "attach.analyze"): _JOB_HANG,
    ("jobview.merge", "attach.classify"): _JOB_HANG,
    ("jobview.merge", "attach.evidence"): _JOB_HANG,
    ("jobview.merge", "attach.flight_recorder"): _FR,
    ("jobview.merge", "attach.stacks"): _JOB_HANG,
    ("train.config", "plan.model"): _SIZES,
    ("scale.runner", "train.launch"): _SCALE_TRAIN,
    ("scale.sweep", "diagnose"): _TRIAGE,
    ("scale.sweep", "train.config"): _SCALE_TRAIN,
    ("scale.sweep", "train.injections"): _SCALE_TRAIN,
    ("scale.sweep", "train.options"): _SCALE_TRAIN,
    ("run.env", "watch.bootstrap"): "run points the job's ranks at the watch bootstrap",
    ("run.hang", "attach.diagnosis"): _HANG,
    ("run.hang", "attach.discover"): _HANG,
    ("run.hang", "attach.stacks"): _HANG,
    ("run.hang", "attach.view"): _HANG,
    ("run.jobnode", "attach.flight_recorder"): _FR,
    ("run.jobnode", "jobview.agent"): _JOB_RUN,
    ("run.jobnode", "jobview.keys"): _JOB_RUN,
    ("run.jobnode", "jobview.leader"): _JOB_RUN,
    ("run.jobnode", "jobview.merge"): _JOB_RUN,
    ("run.jobnode", "jobview.snapshot"): _JOB_RUN,
    ("run.loop", "jobview.report"): _JOB_RUN,
    ("run.outcome", "jobview.report"): _JOB_RUN,
    ("run.spinning", "attach.classify"): _HANG,
    ("run.spinning", "attach.stacks"): _HANG,
    ("run.stack_reads", "attach.stacks"): _HANG,
    ("run.triage", "diagnose"): _TRIAGE,
    ("run.triage", "diagnose.events"): _TRIAGE,
    ("run.watch_events", "watch.events"): _WATCH_FILE,
    ("train.loop", "plan.measure"): _MEMORY,
    ("watch.flight_recorder", "attach.flight_recorder"): _FR,
    ("watch.oom_plan", "plan"): _MEMORY,
}
# Package-level cycles among the modes and the command line that the allowed edges above
# make today (core is left out: it imports no mode but through the root's lazy exports).
ALLOWED_PACKAGE_CYCLES: dict[frozenset[str], str] = {}


@dataclass(frozen=True)
class Import:
    """One import of ``target`` by a module: the first line, and how it runs."""

    target: str
    line: int
    kind: str  # "module" (at import time), "lazy" (inside a function) or "typing"


def short(module: str) -> str:
    """``ddpdoctor.run.runner`` -> ``run.runner``; the package root -> ``""``."""
    return module[len(PACKAGE) + 1:] if module != PACKAGE else ""


def layer_of(module: str) -> str:
    """"core", a mode's name or "entry"; "?" for a module no layer claims."""
    top = short(module).split(".")[0]
    top = MODE_ALIASES.get(top, top)
    if top in CORE:
        return "core"
    if top in LIBRARIES:
        return "library"
    if top in MODES:
        return top
    return "entry" if top in ENTRY else "?"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_sources(root: Path = ROOT / PACKAGE) -> dict[str, tuple[str, bool]]:
    """module name -> (source, is a package's __init__) for every file of the package."""
    return {_module_name(p, root): (p.read_text(), p.name == "__init__.py")
            for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts}


class _Walker(ast.NodeVisitor):
    """Every import in one module, with whether it runs lazily or only for type checkers."""

    def __init__(self, module: str, is_pkg: bool, known: set[str]):
        self.module, self.is_pkg, self.known = module, is_pkg, known
        self.found: dict[str, Import] = {}
        self._kind = ["module"]

    def _resolve(self, name: str) -> str | None:
        while name and name not in self.known:
            name = name.rpartition(".")[0]
        return name or None

    def _add(self, name: str, node: ast.AST) -> None:
        if name != PACKAGE and not name.startswith(PACKAGE + "."):
            return
        target = self._resolve(name)
        if target is None or target == self.module:
            return
        kind = self._kind[-1]
        old = self.found.get(target)
        if old is None or (old.kind != "module" and kind == "module"):
            self.found[target] = Import(target, getattr(node, "lineno", 0), kind)

    def _nested(self, kind: str, node: ast.AST) -> None:
        self._kind.append(kind)
        self.generic_visit(node)
        self._kind.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._nested("lazy" if self._kind[-1] == "module" else self._kind[-1], node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", "")
        if name == "TYPE_CHECKING":
            self._kind.append("typing")
            for child in node.body:
                self.visit(child)
            self._kind.pop()
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            parts = self.module.split(".") if self.is_pkg else self.module.split(".")[:-1]
            parts = parts[:len(parts) - (node.level - 1)]
            base = ".".join(parts + ([node.module] if node.module else []))
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            self._add(sub if sub in self.known else base, node)  # a submodule, else its module

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if (name == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)):
            self._add(node.args[0].value, node)
        self.generic_visit(node)


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, dict[str, Import]]:
    """module -> {imported module: Import}, over the modules given (a real or planted tree)."""
    known = set(sources)
    graph = {}
    for module, (text, is_pkg) in sources.items():
        walker = _Walker(module, is_pkg, known)
        walker.visit(ast.parse(text))
        graph[module] = walker.found
    return graph


def forbidden_edges(graph: dict[str, dict[str, Import]]) -> dict[tuple[str, str], str]:
    """(importer, imported) in short names -> the rule it breaks."""
    bad = {}
    for src, imports in graph.items():
        low = layer_of(src)
        for dst, imp in imports.items():
            high = layer_of(dst)
            where = f"{short(src) or PACKAGE}:{imp.line} ({imp.kind})"
            if low == "core" and high != "core":
                bad[(short(src), short(dst))] = f"{where}: core imports {high}"
            elif low == "library" and high not in ("core", "library"):
                bad[(short(src), short(dst))] = f"{where}: a library imports {high}"
            elif low in MODES and high == "entry":
                bad[(short(src), short(dst))] = f"{where}: a mode imports commands/cli"
            elif low in MODES and high in MODES and high != low:
                bad[(short(src), short(dst))] = f"{where}: mode {low} imports mode {high}"
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def file_cycles(graph: dict[str, dict[str, Import]]) -> list[list[str]]:
    return cycles({m: set(imports) for m, imports in graph.items()})


def package_cycles(graph: dict[str, dict[str, Import]]) -> list[frozenset[str]]:
    layers: dict[str, set[str]] = {}
    for src, imports in graph.items():
        if layer_of(src) == "core":
            continue
        layers.setdefault(layer_of(src), set()).update(
            layer_of(dst) for dst in imports if layer_of(dst) != layer_of(src))
    return [frozenset(c) for c in cycles(layers)]


def _cycle_text(graph: dict[str, dict[str, Import]], cycle: list[str]) -> str:
    members = set(cycle)
    return "; ".join(f"{short(a)} -> {short(b)} (line {imp.line}, {imp.kind})"
                     for a in cycle for b, imp in sorted(graph[a].items()) if b in members)


@functools.cache
def _sources() -> dict[str, tuple[str, bool]]:
    return package_sources()


@functools.cache
def _graph() -> dict[str, dict[str, Import]]:
    return import_graph(_sources())


# ---- the package as it is -------------------------------------------------------------

def test_every_module_has_a_layer():
    unknown = sorted(m for m in _sources() if layer_of(m) == "?")
    assert not unknown, ("put these in CORE, LIBRARIES, MODES or ENTRY of "
                         f"tests/unit/test_layers.py: {unknown}")


def test_no_new_import_against_the_layers():
    bad = forbidden_edges(_graph())
    new = sorted(f"{rule} -> {dst}" for (src, dst), rule in bad.items()
                 if (src, dst) not in ALLOWED)
    assert not new, ("imports against the layers (core <- modes <- commands/cli):\n  "
                     + "\n  ".join(new))


def test_the_allowed_violations_only_shrink():
    bad = forbidden_edges(_graph())
    gone = sorted(f"{src or PACKAGE} -> {dst or PACKAGE}" for src, dst in ALLOWED
                  if (src, dst) not in bad)
    assert not gone, ("no longer imported (or no longer a violation): delete from ALLOWED "
                      "in tests/unit/test_layers.py:\n  " + "\n  ".join(gone))
    assert all(reason.strip() for reason in ALLOWED.values())


def test_no_file_level_import_cycle():
    graph = _graph()
    found = [_cycle_text(graph, c) for c in file_cycles(graph)]
    assert not found, "file-level import cycles:\n  " + "\n  ".join(found)


def test_no_new_package_level_cycle():
    found = package_cycles(_graph())
    new = [sorted(c) for c in found if c not in ALLOWED_PACKAGE_CYCLES]
    assert not new, f"new package-level import cycles: {new}"
    gone = [sorted(c) for c in ALLOWED_PACKAGE_CYCLES if c not in found]
    assert not gone, f"these cycles changed or are gone: update ALLOWED_PACKAGE_CYCLES: {gone}"


def test_the_type_checker_covers_every_module_and_the_core_layer_strictly():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    # the whole package is checked: a folder in `files` covers every module under it
    assert PACKAGE in mypy["files"], "[tool.mypy] files must name the whole package"
    core = {m for m in _sources() if layer_of(m) == "core"}
    strict = next(o for o in mypy["overrides"] if o.get("disallow_untyped_defs"))
    named = set(strict["module"])
    missing = sorted(m for m in core if m not in named
                     and not any(p.endswith(".*") and m.startswith(p[:-1]) for p in named))
    assert not missing, f"[tool.mypy]'s strict override misses core: {missing}"


# ---- the checker catches what it is for ------------------------------------------------

def _planted(**modules: str) -> dict[str, dict[str, Import]]:
    """A fake package: keyword = module path with "__" for ".", value = its source."""
    sources = {f"{PACKAGE}.{name.replace('__', '.')}": (text, False)
               for name, text in modules.items()}
    for pkg in {m.rpartition(".")[0] for m in sources} - set(sources):
        sources[pkg] = ("", True)
    sources.setdefault(PACKAGE, ("", True))
    return import_graph(sources)


def test_a_planted_back_import_from_core_is_caught():
    graph = _planted(core__report="from ddpdoctor.run import runner\n",
                     run__runner="from ddpdoctor.core.report import Report\n")
    bad = forbidden_edges(graph)
    assert list(bad) == [("core.report", "run.runner")]
    assert bad[("core.report", "run.runner")] == "core.report:1 (module): core imports run"
    assert file_cycles(graph) == [["ddpdoctor.core.report", "ddpdoctor.run.runner"]]


def test_a_planted_library_importing_a_mode_is_caught_and_modes_may_import_it():
    graph = _planted(distenv__judge="from ddpdoctor.check import probe\n",
                     check__probe="from ddpdoctor.distenv import judge\n",
                     run__odd_env="from ddpdoctor.distenv.judge import name_findings\n")
    bad = forbidden_edges(graph)
    assert list(bad) == [("distenv.judge", "check.probe")]
    assert bad[("distenv.judge", "check.probe")] == \
        "distenv.judge:1 (module): a library imports check"


def test_the_real_package_with_one_planted_back_import_fails():
    sources = dict(_sources())
    text, is_pkg = sources["ddpdoctor.core.findings"]
    sources["ddpdoctor.core.findings"] = (text + "\ndef _late():\n"
                                          "    from ddpdoctor.run import runner\n", is_pkg)
    graph = import_graph(sources)
    new = {edge: rule for edge, rule in forbidden_edges(graph).items() if edge not in ALLOWED}
    assert list(new) == [("core.findings", "run.runner")]
    assert new[("core.findings", "run.runner")].endswith("(lazy): core imports run")
    cycle = next(c for c in file_cycles(graph) if "ddpdoctor.core.findings" in c)
    assert "ddpdoctor.run.runner" in cycle


def test_a_planted_lazy_cycle_between_two_files_is_caught():
    graph = _planted(run__outcome="def f():\n    from .runner import code\n",
                     run__runner="def g():\n    from . import outcome\n")
    assert forbidden_edges(graph) == {}  # one mode: no layer rule, only the cycle
    assert file_cycles(graph) == [["ddpdoctor.run.outcome", "ddpdoctor.run.runner"]]
    assert graph["ddpdoctor.run.outcome"]["ddpdoctor.run.runner"].kind == "lazy"


def test_a_planted_type_checking_import_still_counts():
    graph = _planted(train__host_checks="from typing import TYPE_CHECKING\n"
                                        "if TYPE_CHECKING:\n"
                                        "    from ddpdoctor.train.injections import X\n",
                     train__injections="import ddpdoctor.train.host_checks\n")
    assert graph["ddpdoctor.train.host_checks"]["ddpdoctor.train.injections"].kind == "typing"
    assert file_cycles(graph) == [["ddpdoctor.train.host_checks", "ddpdoctor.train.injections"]]


def test_a_planted_mode_reaching_into_commands_and_another_mode_is_caught():
    graph = _planted(scale__runner="import importlib\n"
                                   "def f():\n"
                                   "    importlib.import_module('ddpdoctor.commands.train')\n",
                     commands__train="", attach__stacks="",
                     jobview__merge="from ..attach.stacks import Frame\n")
    assert forbidden_edges(graph) == {
        ("scale.runner", "commands.train"): "scale.runner:3 (lazy): a mode imports commands/cli",
        ("jobview.merge", "attach.stacks"): "jobview.merge:1 (module): mode jobview imports "
                                            "mode attach",
    }


def test_a_planted_package_cycle_is_caught():
    graph = _planted(plan__fit="from ddpdoctor.train.config import SIZES\n",
                     train__config="def f():\n    from ddpdoctor.plan import fit\n")
    assert package_cycles(graph) == [frozenset({"plan", "train"})]
    assert file_cycles(graph) == [["ddpdoctor.plan.fit", "ddpdoctor.train.config"]]
