"""G2 boundary test (issue 32): the project's import graph, read from the source with ``ast`` only.

Nothing of engine/, indexes/ or ray_jobs/ is imported here: every ``.py`` file under those three
packages is parsed, and each import statement becomes one or more edges ``importer -> imported``,
with its file:line and its kind:

* ``top``: at module level (also under ``try``/``if`` at module level, and in class bodies);
* ``function``: inside a function or method (at any depth);
* ``type-checking``: under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``), wherever that is.

All three kinds are edges: an import that is only deferred (function) or only for the type checker
still ties the two modules together, and moving an import into a function or under TYPE_CHECKING
does not break a cycle here (cut the dependency instead).

Resolution: relative imports are made absolute. ``from pkg import name`` is an edge to the module
``pkg.name`` when ``pkg/name.py`` or ``pkg/name/__init__.py`` exists, and to ``pkg`` otherwise;
``import a.b.c`` is an edge to ``a.b.c`` only (not to ``a`` and ``a.b``, which Python also runs:
counting them would make every ``__init__`` that imports its own submodules a cycle). An edge to a
package means its ``__init__.py``. perf/, tests/, scripts/ and dateline/ are not part of the graph.

The rules (each test below fails on a violation that is not in its allow-list):

1. no import cycle: no strongly connected component (SCC) with more than one module, no self-import;
2. nothing under engine/ or indexes/ imports ray_jobs;
3. a benchmark package engine/benchmarks/<name>/ does not import another benchmark's package
   (engine/benchmarks/__init__.py and modules directly in engine/benchmarks/ are shared, and fine);
4. no ``from x import _name`` (a private name: one leading underscore, not a dunder) where ``x`` is
   another module of the project (a module taking its own private names is fine; a package's
   module taking a private name from a sibling or from its package's ``__init__`` is across modules);
5. the packages of ``ray_jobs/`` import only the packages their layer allows (``RAY_JOBS_LAYERS``; issue 44):
   nothing imports ``cli/``; ``cluster/`` knows no job; ``outputs/`` starts nothing (no Ray, no
   ``cluster``, no job); ``run`` and ``build`` may use ``judging``, ``budget``, ``cluster`` and
   ``config`` (``build`` also ``outputs``, for its report); the one edge between two jobs is ``build -> run``; of ``config/``, only the job
   harness touches ``cluster``. The ``ray_jobs/`` root holds only ``__init__.py``;
6. no module of engine/, indexes/ or ray_jobs/ is over ``MAX_MODULE_LINES`` lines (split it along its seams).

Run ``pytest -q tests/test_boundaries.py -rA`` (or ``-s``) to see the graph's report: every SCC with
the edges that close it (file:line and kind), the private imports, and the function-level counts.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("engine", "indexes", "ray_jobs")

TOP, FUNCTION, TYPE_CHECKING = "top", "function", "type-checking"

# ---------------------------------------------------------------------------------------------
# ALLOW-LISTS: today's known violations (measured at the commit that added this test).
#
# Every later refactor commit of issue 32 that removes a violation must remove its entry in the
# same commit (the test fails on an entry that no longer occurs, so the lists only shrink and stay
# true). Both are empty since the storage split (issue 32, S1): no cycle, no private import across
# modules. They stay, empty, so a deliberate exception is one reviewed line. A new violation, or an SCC that gains a
# member, fails: it is not in the list (an SCC is matched by its exact set of members, so one that
# shrinks must have its entry replaced by the smaller set, in the commit that shrinks it).
# ---------------------------------------------------------------------------------------------

# Rule 1: import cycles, one frozenset of module names per SCC.
ALLOWED_SCCS: frozenset[frozenset[str]] = frozenset({
})

# Rule 4: (importer, module the name is taken from, name).
ALLOWED_PRIVATE_IMPORTS: frozenset[tuple[str, str, str]] = frozenset({
})

# Rules 2 and 3 have no violations today, so no allow-list: they hold from now on.

# Function-level imports that resolve into the project (engine, indexes, ray_jobs), counted as
# import statements. A tight ratchet: the test fails above this number (an in-project import put in
# a function is the usual way a cycle is hidden from Python, and this graph counts it anyway), and
# below it too, with the number to write here, so it stays the real count and only goes down.
FUNCTION_LEVEL_IN_PROJECT = 136
# Function-level imports of everything else (stdlib and third party). A ceiling only, not a tight
# ratchet: many are deliberate lazy imports of heavy dependencies (ray, pyarrow, openai, hydra) that
# keep `dateline` and the workers quick to start, so moving one to the top is not progress per se
# and needs no edit here; adding one must raise this number in the diff, where a reviewer sees it.
# 136: torch in the index replica's constructor (its thread count; LocalIndex users never load it).
# 137: ray in estimate.cluster_nodes (what the planner prices on; estimate is imported before Ray starts).
FUNCTION_LEVEL_OTHER_CEILING = 137


# Rule 5: which ray_jobs packages each ray_jobs package may import (besides itself, engine and
# indexes). ``cli`` may import them all and nothing may import it; a package missing here is a new
# package of the root, which needs its line (and a docstring saying what it owns).
RAY_JOBS_LAYERS: dict[str, frozenset[str]] = {
    "cli": frozenset({"config", "cluster", "budget", "judging", "run", "build", "outputs"}),
    # build -> run: the one job-to-job edge; a build writes its report with the outputs' page writer
    "build": frozenset({"run", "judging", "budget", "cluster", "config", "outputs"}),
    "run": frozenset({"judging", "budget", "cluster", "config"}),
    "judging": frozenset({"budget", "cluster", "config"}),
    "budget": frozenset({"cluster", "config"}),
    "cluster": frozenset({"config"}),           # the doctor composes its overrides; no job
    "config": frozenset({"cluster"}),           # the harness alone (CONFIG_TO_CLUSTER)
    "outputs": frozenset(),                     # reads run dirs: no job, no cluster
}
CONFIG_TO_CLUSTER = frozenset({"ray_jobs.config.harness"})       # builds the jobs' Session
NO_RAY = frozenset({"outputs"})                  # packages that never import ray itself

# Rule 6: the longest a module may be, and the modules over it today (the list only shrinks).
MAX_MODULE_LINES = 400
ALLOWED_LONG_MODULES: frozenset[str] = frozenset({
})


# ---------------------------------------------------------------------------------------------
# The graph builder
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Edge:
    importer: str            # module name of the importing file
    target: str              # the module imported (a project module, or the dotted name outside)
    in_project: bool
    path: str                # the importing file, relative to the root
    line: int
    kind: str                # TOP, FUNCTION or TYPE_CHECKING
    statement: int           # one number per import statement (several edges may share it)
    source: str | None       # for `from X import name`: X resolved (absolute); None for `import X`
    name: str | None         # for `from X import name`: the name; None for `import X`

    def where(self) -> str:
        return f"{self.path}:{self.line} ({self.kind})"


@dataclass
class Graph:
    modules: dict[str, Path]            # module name -> file (a package: its __init__.py)
    packages: frozenset[str]
    edges: list[Edge]

    def project_edges(self) -> list[Edge]:
        return [e for e in self.edges if e.in_project]

    def adjacency(self) -> dict[str, set[str]]:
        adj: dict[str, set[str]] = {m: set() for m in self.modules}
        for e in self.project_edges():
            adj[e.importer].add(e.target)
        return adj


def find_modules(root: Path, roots: Iterable[str]) -> tuple[dict[str, Path], frozenset[str]]:
    """Every module of the packages ``roots`` under ``root``. A file in a folder without
    ``__init__.py`` (sample data) is no module."""
    modules: dict[str, Path] = {}
    packages: set[str] = set()
    for top in roots:
        for path in sorted((root / top).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if not all((root.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(1, len(parts))):
                continue
            if parts[-1] == "__init__":
                name = ".".join(parts[:-1])
                packages.add(name)
            else:
                name = ".".join(parts)
            modules[name] = path
    return modules, frozenset(packages)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement of ``tree`` with its kind."""
    def walk(node: ast.AST, in_function: bool, in_tc: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, TYPE_CHECKING if in_tc else FUNCTION if in_function else TOP
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from walk(child, True, in_tc)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), in_function, True)
                for stmt in child.orelse:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), in_function, in_tc)
            else:
                yield from walk(child, in_function, in_tc)
    yield from walk(tree, False, False)


def build_graph(root: Path = REPO, roots: Iterable[str] = ROOTS) -> Graph:
    roots = tuple(roots)
    modules, packages = find_modules(root, roots)

    def known(dotted: str) -> str | None:
        """The longest prefix of ``dotted`` that is a project module (None: outside the project)."""
        parts = dotted.split(".")
        if parts[0] not in roots:
            return None
        for i in range(len(parts), 0, -1):
            if ".".join(parts[:i]) in modules:
                return ".".join(parts[:i])
        return None

    edges: list[Edge] = []
    statement = 0
    for importer, path in modules.items():
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        for node, kind in _imports(tree):
            statement += 1
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = known(alias.name)
                    edges.append(Edge(importer, target or alias.name, target is not None, rel, node.lineno, kind,
                                      statement, None, None))
                continue
            if node.level:
                base = importer.split(".") if importer in packages else importer.split(".")[:-1]
                if node.level > 1:
                    base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                target = sub if alias.name != "*" and sub in modules and known(sub) else known(source)
                edges.append(Edge(importer, target or source, target is not None, rel, node.lineno, kind,
                                  statement, source, alias.name))
    return Graph(modules, packages, edges)


def sccs(adj: dict[str, set[str]]) -> list[frozenset[str]]:
    """The import cycles: SCCs with more than one module, and single modules that import themselves
    (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for start in sorted(adj):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(adj[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(adj.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    members = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        members.add(w)
                        if w == v:
                            break
                    if len(members) > 1 or v in adj.get(v, ()):
                        found.append(frozenset(members))
    return found


def describe_scc(graph: Graph, members: frozenset[str]) -> str:
    """An SCC with every edge inside it, each with its file:line and kind: where to cut."""
    lines = [f"SCC of {len(members)}: {', '.join(sorted(members))}"]
    inside: dict[tuple[str, str], list[Edge]] = defaultdict(list)
    for e in graph.project_edges():
        if e.importer in members and e.target in members:
            inside[(e.importer, e.target)].append(e)
    for (a, b), sites in sorted(inside.items()):
        lines.append(f"  {a} -> {b}: " + "; ".join(sorted({s.where() for s in sites})))
    return "\n".join(lines)


def private_imports(graph: Graph) -> dict[tuple[str, str, str], list[Edge]]:
    """``from x import _name`` where x is another project module than the importer. A name that is
    itself a submodule (``from pkg import _sub``) counts too: x is ``pkg``."""
    found: dict[tuple[str, str, str], list[Edge]] = defaultdict(list)
    for e in graph.edges:
        if e.source is None or e.name is None or not e.in_project:
            continue
        private = e.name.startswith("_") and not (e.name.startswith("__") and e.name.endswith("__"))
        source = e.source if e.source in graph.modules else e.target
        if private and source != e.importer:
            found[(e.importer, source, e.name)].append(e)
    return dict(found)


def function_level_counts(graph: Graph) -> dict[str, int]:
    """Function-level import statements (not under TYPE_CHECKING): in-project and other. A statement
    that imports both (``import os, engine.x``) counts once, as in-project."""
    by_statement: dict[int, bool] = {}
    for e in graph.edges:
        if e.kind == FUNCTION:
            by_statement[e.statement] = by_statement.get(e.statement, False) or e.in_project
    tc = {e.statement for e in graph.edges if e.kind == TYPE_CHECKING}
    return {"in_project": sum(by_statement.values()), "other": sum(not v for v in by_statement.values()),
            "type_checking": len(tc)}


@functools.cache
def project() -> Graph:
    return build_graph()


def _benchmark(graph: Graph, module: str) -> str | None:
    """The benchmark package ``module`` belongs to (engine.benchmarks.<name> with a folder), or None."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[:2] == ["engine", "benchmarks"] and ".".join(parts[:3]) in graph.packages:
        return parts[2]
    return None


def ray_jobs_imports(graph: Graph) -> list[Edge]:
    """Rule 2: edges from engine/ or indexes/ into ray_jobs."""
    return [e for e in graph.project_edges()
            if e.importer.split(".")[0] in ("engine", "indexes") and e.target.split(".")[0] == "ray_jobs"]


def cross_benchmark_imports(graph: Graph) -> list[Edge]:
    """Rule 3: edges from one benchmark package into another's."""
    return [e for e in graph.project_edges()
            if (a := _benchmark(graph, e.importer)) and (b := _benchmark(graph, e.target)) and a != b]


def _ray_jobs_package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "ray_jobs" else None


def layer_violations(graph: Graph) -> list[tuple[Edge, str]]:
    """Rule 5: each edge between ray_jobs packages that its layer does not allow, with why."""
    bad: list[tuple[Edge, str]] = []
    for e in graph.edges:
        src = _ray_jobs_package(e.importer)
        if src is None:
            continue
        if not e.in_project:
            if src in NO_RAY and e.target.split(".")[0] == "ray":
                bad.append((e, f"{src}/ starts nothing: no ray"))
            continue
        dst = _ray_jobs_package(e.target)
        if dst is None or dst == src:
            continue
        if dst == "cli":
            bad.append((e, "nothing imports cli/"))
        elif src not in RAY_JOBS_LAYERS:
            bad.append((e, f"ray_jobs/{src}/ has no line in RAY_JOBS_LAYERS"))
        elif dst not in RAY_JOBS_LAYERS[src]:
            bad.append((e, f"{src}/ may not import {dst}/ (it may import: {', '.join(sorted(RAY_JOBS_LAYERS[src])) or 'no other package'})"))
        elif src == "config" and dst == "cluster" and e.importer not in CONFIG_TO_CLUSTER:
            bad.append((e, "of config/, only the job harness touches cluster/"))
    return bad


def root_modules(root: Path = REPO) -> list[str]:
    """The files at the root of ray_jobs/ other than its ``__init__.py`` (rule 5)."""
    return sorted(p.name for p in (root / "ray_jobs").glob("*.py") if p.name != "__init__.py")


def long_modules(root: Path = REPO, roots: Iterable[str] = ROOTS) -> dict[str, int]:
    """Rule 6: every module over MAX_MODULE_LINES lines, with its length."""
    modules, _ = find_modules(root, roots)
    lengths = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in modules.items()}
    return {m: n for m, n in sorted(lengths.items()) if n > MAX_MODULE_LINES}


# ---------------------------------------------------------------------------------------------
# The rules, on the project
# ---------------------------------------------------------------------------------------------

def test_graph_covers_the_project() -> None:
    graph = project()
    assert len(graph.modules) >= 90, sorted(graph.modules)
    assert {"engine", "indexes", "ray_jobs", "engine.benchmarks.newsagent", "ray_jobs.run"} <= set(graph.modules)
    assert not any(m.startswith(("perf", "tests", "dateline")) for m in graph.modules)
    assert len(graph.project_edges()) > 300


def test_no_new_import_cycles() -> None:
    graph = project()
    found = sccs(graph.adjacency())
    report = "\n\n".join(describe_scc(graph, s) for s in sorted(found, key=sorted))
    print(f"\n{len(found)} import SCCs today:\n{report}")
    problems = []
    for s in found:
        if s in ALLOWED_SCCS:
            continue
        shrunk_from = [a for a in ALLOWED_SCCS if s < a]
        grown_from = [a for a in ALLOWED_SCCS if s & a and not s < a]
        if shrunk_from:
            why = ("shrank from an allowed SCC (progress): replace its ALLOWED_SCCS entry with this set, "
                   "or remove the entry if this is gone")
        elif grown_from:
            why = "grew: it has modules the allowed SCC did not (" + ", ".join(sorted(s - grown_from[0])) + ")"
        else:
            why = "new"
        problems.append(f"{why}:\n{describe_scc(graph, s)}")
    assert not problems, "import cycles not in ALLOWED_SCCS (cut one edge of each):\n\n" + "\n\n".join(problems)


def test_cycle_allow_list_is_current() -> None:
    found = set(sccs(project().adjacency()))
    stale = [sorted(a) for a in ALLOWED_SCCS if a not in found]
    assert not stale, f"ALLOWED_SCCS entries that no longer occur (remove or shrink them in this commit): {stale}"


def test_engine_and_indexes_do_not_import_ray_jobs() -> None:
    bad = [f"{e.importer} -> {e.target}: {e.where()}" for e in ray_jobs_imports(project())]
    assert not bad, "engine/ and indexes/ must not import ray_jobs:\n" + "\n".join(bad)


def test_benchmarks_do_not_import_each_other() -> None:
    bad = [f"{e.importer} -> {e.target}: {e.where()}" for e in cross_benchmark_imports(project())]
    assert not bad, ("a benchmark package imports another benchmark's package (move what they share to a "
                     "module in engine/benchmarks/ or engine/):\n" + "\n".join(bad))


def test_no_new_private_imports_across_modules() -> None:
    found = private_imports(project())
    print("\nprivate-name imports across modules today:")
    for key, sites in sorted(found.items()):
        print(f"  {key}: " + "; ".join(e.where() for e in sites))
    new = {k: v for k, v in found.items() if k not in ALLOWED_PRIVATE_IMPORTS}
    assert not new, ("`from x import _name` across modules (make the name public, or keep it in one module):\n"
                     + "\n".join(f"  {k}: " + "; ".join(e.where() for e in v) for k, v in sorted(new.items())))


def test_private_import_allow_list_is_current() -> None:
    stale = sorted(ALLOWED_PRIVATE_IMPORTS - set(private_imports(project())))
    assert not stale, f"ALLOWED_PRIVATE_IMPORTS entries that no longer occur (remove them in this commit): {stale}"


def test_ray_jobs_packages_import_only_what_their_layer_allows() -> None:
    bad = [f"{e.importer} -> {e.target}: {e.where()}: {why}" for e, why in layer_violations(project())]
    assert not bad, "imports across ray_jobs packages that break the layering (RAY_JOBS_LAYERS):\n" + "\n".join(bad)


def test_every_ray_jobs_package_has_a_layer_and_the_root_only_its_init() -> None:
    packages = {m.split(".")[1] for m in project().packages if m.count(".") == 1 and m.startswith("ray_jobs.")}
    assert packages == set(RAY_JOBS_LAYERS), "ray_jobs/ packages and RAY_JOBS_LAYERS differ"
    assert root_modules() == [], "the ray_jobs/ root holds only __init__.py: put each module in its package"


def test_no_module_over_the_line_limit() -> None:
    found = long_modules()
    new = {m: n for m, n in found.items() if m not in ALLOWED_LONG_MODULES}
    assert not new, (f"modules over {MAX_MODULE_LINES} lines (split each along its seams):\n"
                     + "\n".join(f"  {m}: {n}" for m, n in new.items()))
    stale = sorted(ALLOWED_LONG_MODULES - set(found))
    assert not stale, f"ALLOWED_LONG_MODULES entries now within the limit (remove them in this commit): {stale}"


def test_function_level_import_counts() -> None:
    counts = function_level_counts(project())
    print(f"\nfunction-level import statements: {counts['in_project']} in-project, {counts['other']} other "
          f"(stdlib and third party); {counts['type_checking']} under TYPE_CHECKING")
    assert counts["in_project"] <= FUNCTION_LEVEL_IN_PROJECT, (
        f"{counts['in_project']} function-level in-project imports, more than {FUNCTION_LEVEL_IN_PROJECT}: "
        "import at the top of the module (a cycle that forces a function-level import must be cut instead)")
    assert counts["in_project"] == FUNCTION_LEVEL_IN_PROJECT, (
        f"function-level in-project imports fell to {counts['in_project']}: "
        f"set FUNCTION_LEVEL_IN_PROJECT = {counts['in_project']} in this commit (the ratchet only goes down)")
    assert counts["other"] <= FUNCTION_LEVEL_OTHER_CEILING, (
        f"{counts['other']} function-level imports of stdlib/third-party modules, more than the ceiling "
        f"{FUNCTION_LEVEL_OTHER_CEILING}: import at the top, or raise the ceiling with the reason (start-up time)")


# ---------------------------------------------------------------------------------------------
# The checker on a synthetic package, so that it cannot pass by finding nothing
# ---------------------------------------------------------------------------------------------

def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.fixture
def synthetic(tmp_path: Path) -> Graph:
    _write(tmp_path, {
        "pkg/__init__.py": "from pkg import sub\nfrom . import other\nfrom pkg.other import helper\n",
        "pkg/sub.py": "from pkg import thing\n\n\ndef f():\n    from pkg.other import helper\n",
        "pkg/other.py": (
            "from typing import TYPE_CHECKING\n"
            "import json\n"
            "if TYPE_CHECKING:\n    from pkg.typed import T\n"
            "def helper():\n    import os\n    from .sub import f\n"
            "    from .deep import _secret, __version__\n"
        ),
        "pkg/typed.py": "import pkg.other\n",
        "pkg/deep/__init__.py": "from . import leaf\nfrom .leaf import _mine\n_secret = 1\n__version__ = '1'\n",
        "pkg/deep/leaf.py": "from ..deep import _secret\nfrom . import _private_mod\n_mine = 2\n\n\ndef g():\n"
                            "    from pkg.deep.leaf import _mine\n",
        "pkg/deep/_private_mod.py": "",
        "pkg/data/not_a_module.py": "import pkg\n",           # no __init__.py: no module
        "pkg/selfish.py": "def h():\n    from pkg.selfish import h\n",
    })
    return build_graph(tmp_path, ["pkg"])


def _edges(graph: Graph, importer: str) -> set[tuple[str, str]]:
    return {(e.target, e.kind) for e in graph.edges if e.importer == importer}


def test_builder_resolves_submodules_and_relative_imports(synthetic: Graph) -> None:
    assert "pkg.data.not_a_module" not in synthetic.modules
    # `from pkg import sub` and `from . import other` go to the submodules, not to pkg itself;
    # `from pkg import thing` (no such module) goes to pkg, i.e. its __init__.py
    assert _edges(synthetic, "pkg") == {("pkg.sub", TOP), ("pkg.other", TOP)}
    assert ("pkg", TOP) in _edges(synthetic, "pkg.sub")
    assert ("pkg.sub", FUNCTION) in _edges(synthetic, "pkg.other")                # from .sub import f
    assert ("pkg.deep", TOP) in _edges(synthetic, "pkg.deep.leaf")                # from ..deep import _secret
    assert ("pkg.deep._private_mod", TOP) in _edges(synthetic, "pkg.deep.leaf")   # from . import _private_mod
    outside = {(e.target, e.kind) for e in synthetic.edges if not e.in_project}
    assert outside == {("typing", TOP), ("json", TOP), ("os", FUNCTION)}


def test_builder_finds_cycles_of_every_kind(synthetic: Graph) -> None:
    found = set(sccs(synthetic.adjacency()))
    # pkg -> pkg.sub -> pkg (top) ; pkg.sub -> pkg.other (function) -> pkg.sub (function);
    # pkg.other -> pkg.typed (TYPE_CHECKING) -> pkg.other (top); pkg.deep -> pkg.deep.leaf -> pkg.deep
    assert found == {frozenset({"pkg", "pkg.sub", "pkg.other", "pkg.typed"}),
                     frozenset({"pkg.deep", "pkg.deep.leaf"}),
                     frozenset({"pkg.selfish"})}                    # selfish.h imports its own module
    text = describe_scc(synthetic, frozenset({"pkg", "pkg.sub", "pkg.other", "pkg.typed"}))
    assert "pkg.other -> pkg.typed: pkg/other.py:4 (type-checking)" in text
    assert "pkg.sub -> pkg.other: pkg/sub.py:5 (function)" in text
    assert "pkg.typed -> pkg.other: pkg/typed.py:1 (top)" in text


def test_builder_cycle_through_a_function_import_only(tmp_path: Path) -> None:
    _write(tmp_path, {"q/__init__.py": "", "q/a.py": "import q.b\n",
                      "q/b.py": "def f():\n    from q.a import x\n"})
    graph = build_graph(tmp_path, ["q"])
    assert sccs(graph.adjacency()) == [frozenset({"q.a", "q.b"})]
    assert "q.b -> q.a: q/b.py:2 (function)" in describe_scc(graph, frozenset({"q.a", "q.b"}))


def test_builder_finds_private_imports_across_modules(synthetic: Graph) -> None:
    found = set(private_imports(synthetic))
    assert found == {
        ("pkg.other", "pkg.deep", "_secret"),          # another package's private
        ("pkg.deep", "pkg.deep.leaf", "_mine"),        # a package from its own submodule: across modules
        ("pkg.deep.leaf", "pkg.deep", "_secret"),      # a submodule from its own package: across modules
        ("pkg.deep.leaf", "pkg.deep", "_private_mod"),  # a private submodule, taken from its package
    }                                                  # not: __version__ (dunder), leaf's own _mine


def test_builder_counts_function_level_imports(synthetic: Graph) -> None:
    # functions: sub.f (1 in-project), other.helper (os: other; .sub and .deep: in-project), leaf.g, selfish.h
    assert function_level_counts(synthetic) == {"in_project": 5, "other": 1, "type_checking": 1}


def test_builder_finds_layer_and_benchmark_violations(tmp_path: Path) -> None:
    _write(tmp_path, {
        "engine/__init__.py": "",
        "engine/util.py": "def f():\n    from ray_jobs import run\n",            # rule 2, function-level
        "engine/benchmarks/__init__.py": "from engine.benchmarks import a, b\nfrom . import shared\n",
        "engine/benchmarks/shared.py": "from engine.benchmarks.a import x\n",      # shared module: fine
        "engine/benchmarks/a/__init__.py": "from . import core\nfrom engine.benchmarks import shared\n",
        "engine/benchmarks/a/core.py": "from engine.benchmarks import b, get\n",   # rule 3 (b); get: fine
        "engine/benchmarks/b/__init__.py": "",
        "engine/benchmarks/b/deep/__init__.py": "",
        "engine/benchmarks/b/deep/leaf.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from engine.benchmarks.a.core import Thing\n"   # rule 3, type-checking
        ),
        "indexes/__init__.py": "import ray_jobs.cli\n",                             # rule 2, top
        "ray_jobs/__init__.py": "", "ray_jobs/run.py": "import engine.util\n", "ray_jobs/cli.py": "",
    })
    graph = build_graph(tmp_path, ROOTS)
    assert {(e.importer, e.target, e.kind) for e in ray_jobs_imports(graph)} == {
        ("engine.util", "ray_jobs.run", FUNCTION), ("indexes", "ray_jobs.cli", TOP)}
    assert {(e.importer, e.target, e.kind) for e in cross_benchmark_imports(graph)} == {
        ("engine.benchmarks.a.core", "engine.benchmarks.b", TOP),
        ("engine.benchmarks.b.deep.leaf", "engine.benchmarks.a.core", TYPE_CHECKING)}


# Rule 5 and 6 on synthetic trees: one violation per rule, each found (and nothing else).
LAYER_CASES = {
    "nothing imports cli": ("ray_jobs/run/x.py", "from ray_jobs.cli import main\n", "nothing imports cli/"),
    "cluster knows no job": ("ray_jobs/cluster/x.py", "from ray_jobs.run import y\n", "cluster/ may not import run/"),
    "cluster knows no judging": ("ray_jobs/cluster/x.py", "def f():\n    import ray_jobs.judging.y\n",
                                 "cluster/ may not import judging/"),
    "outputs starts no ray": ("ray_jobs/outputs/x.py", "import ray\n", "outputs/ starts nothing: no ray"),
    "outputs starts no session": ("ray_jobs/outputs/x.py", "from ray_jobs.cluster.y import Session\n",
                                  "outputs/ may not import cluster/"),
    "outputs imports no job": ("ray_jobs/outputs/x.py", "from ray_jobs.run.y import z\n", "outputs/ may not import run/"),
    "run does not import build": ("ray_jobs/run/x.py", "from ray_jobs.build import y\n", "run/ may not import build/"),
    "judging imports no job": ("ray_jobs/judging/x.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                               "    from ray_jobs.run.y import z\n", "judging/ may not import run/"),
    "judging imports no output": ("ray_jobs/judging/x.py", "from ray_jobs.outputs import y\n",
                                  "judging/ may not import outputs/"),
    "budget imports no judging": ("ray_jobs/budget/x.py", "from ray_jobs.judging import y\n",
                                  "budget/ may not import judging/"),
    "config touches cluster only in the harness": ("ray_jobs/config/x.py", "from ray_jobs.cluster import y\n",
                                                   "of config/, only the job harness touches cluster/"),
    "a package without a layer": ("ray_jobs/newjob/x.py", "from ray_jobs.run import y\n",
                                  "ray_jobs/newjob/ has no line in RAY_JOBS_LAYERS"),
}
LAYER_PACKAGES = ("cli", "run", "build", "cluster", "judging", "budget", "outputs", "config", "newjob")


def _layer_tree(tmp_path: Path, extra: dict[str, str]) -> Graph:
    files = {"ray_jobs/__init__.py": ""}
    for pkg in LAYER_PACKAGES:
        files[f"ray_jobs/{pkg}/__init__.py"] = ""
        files[f"ray_jobs/{pkg}/y.py"] = ""
    files.update({"ray_jobs/cli/main.py": "", "ray_jobs/config/harness.py": "from ray_jobs.cluster import y\n",
                  "ray_jobs/build/ok.py": "from ray_jobs.run import y\n",          # build -> run: allowed
                  "ray_jobs/run/ok.py": "from ray_jobs.judging import y\nfrom ray_jobs.budget import y\n",
                  "ray_jobs/cli/ok.py": "from ray_jobs.outputs import y\nimport ray\n"})
    files.update(extra)
    _write(tmp_path, files)
    return build_graph(tmp_path, ["ray_jobs"])


def test_layer_rules_allow_the_allowed_edges(tmp_path: Path) -> None:
    assert layer_violations(_layer_tree(tmp_path, {})) == []


@pytest.mark.parametrize("case", sorted(LAYER_CASES))
def test_layer_rule_fails_on_an_import_that_breaks_it(tmp_path: Path, case: str) -> None:
    path, text, why = LAYER_CASES[case]
    found = layer_violations(_layer_tree(tmp_path, {path: text}))
    assert [(e.path, w.startswith(why)) for e, w in found] == [(path, True)], found


def test_root_and_line_checks_find_what_breaks_them(tmp_path: Path) -> None:
    _write(tmp_path, {"ray_jobs/__init__.py": "", "ray_jobs/drawer.py": "", "engine/__init__.py": "",
                      "engine/big.py": "x = 1\n" * (MAX_MODULE_LINES + 1), "engine/fits.py": "x = 1\n" * MAX_MODULE_LINES})
    assert root_modules(tmp_path) == ["drawer.py"]
    assert long_modules(tmp_path, ["engine", "ray_jobs"]) == {"engine.big": MAX_MODULE_LINES + 1}
