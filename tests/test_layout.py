"""The codebase's shape: no import cycle inside ``synth/``, imports that only point down the
package's floors (:data:`FLOORS`), and every package is installed.

The import graph is read from the source with :mod:`ast` (every ``import``/``from ... import``,
including the ones deferred into function bodies, since a deferred import only hides a cycle), so
the check needs no import of the code and runs in well under a second.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "synth"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a ``from X import ...`` names (before looking at the imported names)."""
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def import_graph() -> nx.DiGraph:
    """Module -> module it imports, for every module under ``synth/`` (edges stay inside synth)."""
    modules = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in modules else base)
            for target in targets:
                # ``import a.b.c`` loads a, a.b and a.b.c; the deepest one inside synth is the edge
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph.add_edge(name, target)
    return graph


def test_graph_sees_imports() -> None:
    """The graph is not vacuous: a known import edge is in it."""
    graph = import_graph()
    assert graph.number_of_nodes() > 50
    assert graph.has_edge("synth.solve", "synth.verify")


def test_no_import_cycle_in_synth() -> None:
    graph = import_graph()
    cycles = [c for c in nx.simple_cycles(graph) if len(c) > 0]
    shown = ["  " + " -> ".join([*c, c[0]]) for c in sorted(cycles, key=len)[:10]]
    assert not cycles, f"{len(cycles)} import cycle(s) in synth/, e.g.:\n" + "\n".join(shown)


FLOORS: tuple[tuple[str, ...], ...] = (
    # 0: vocabulary every layer shares: errors, files, sizes, the topology and schedule data, the
    #    calibration file format, the idle cores a solve may put workers on
    ("synth", "synth.errors", "synth.files", "synth.sizes", "synth.topology", "synth.schedule",
     "synth.collectives", "synth.steps", "synth.progress", "synth.schema", "synth.memo", "synth.collector",
     "synth.cores", "synth.calibration"),
    # 1: building and checking topologies and schedules
    ("synth.builders", "synth.topology_io", "synth.groups", "synth.cuts", "synth.bounds",
     "synth.verify", "synth.guards", "synth.summary"),
    # 2: program IRs and their emitters/interpreters
    ("synth.emit", "synth.mscclpp", "synth.closed.ir", "synth.closed.mesh", "synth.closed.reference",
     "synth.closed.standin", "synth.closed.constraints", "synth.sketches"),
    # 3: time models
    ("synth.timing", "synth.closed.cost", "synth.closed.neuron", "synth.tuning", "synth.calibrated"),
    # 4: encodings and importers
    ("synth.encodings", "synth.topo_import", "synth.dsl"),
    # 5: choosing among candidates
    ("synth.select", "synth.closed.strategies", "synth.closed.lower", "synth.closed.search"),
    # 6: writing files
    ("synth.outputs", "synth.closed.emit", "synth.closed.columns", "synth.closed.nki",
     "synth.closed.winner", "synth.closed"),
    # 7: whole commands as a library
    ("synth.solve", "synth.solve_closed", "synth.relabel", "synth.catalog", "synth.calibrate"),
    # 8: the command line (``python -m synth`` is the command line)
    ("synth.cli", "synth.__main__"),
)
"""The package's floors, lowest first: a module imports only from its own floor or below. A name
covers its subpackage's modules too, except the two packages whose modules sit on several floors
(:data:`SPLIT_PACKAGES`), whose every module is named."""

SPLIT_PACKAGES = frozenset({"synth", "synth.closed"})


def floor_of(module: str) -> int | None:
    """The floor of ``module``: that of the longest name in :data:`FLOORS` covering it."""
    best: tuple[int, int] | None = None
    for level, names in enumerate(FLOORS):
        for name in names:
            covers = module == name or (name not in SPLIT_PACKAGES and module.startswith(name + "."))
            if covers and (best is None or len(name) > best[1]):
                best = (level, len(name))
    return None if best is None else best[0]


def test_floor_of_reads_the_floors() -> None:
    """The lookup itself: a subpackage module takes its package's floor, a split package's does
    not, and the longest name wins."""
    assert floor_of("synth.timing.program_machine") == 3
    assert floor_of("synth.closed") == 6 and floor_of("synth.closed.ir") == 2
    assert floor_of("synth.nothing") is None and floor_of("synth.closed.nothing") is None


def test_every_module_has_a_floor() -> None:
    """A new module is placed on a floor (here) before it can be checked; every name placed is a
    module, named once."""
    graph = import_graph()
    assert sorted(m for m in graph if floor_of(m) is None) == []
    named = [name for names in FLOORS for name in names]
    assert len(named) == len(set(named))
    assert [n for n in named if n not in graph and not any(m.startswith(n + ".") for m in graph)] == []


def test_imports_only_point_down() -> None:
    """No module imports from a floor above its own (deferred imports included: a deferred import
    only hides the arrow)."""
    graph = import_graph()
    upward = sorted(f"  {a} (floor {floor_of(a)}) -> {b} (floor {floor_of(b)})"
                    for a, b in graph.edges
                    if floor_of(a) is not None and floor_of(b) is not None
                    and floor_of(b) > floor_of(a))
    assert not upward, f"{len(upward)} import(s) up a floor:\n" + "\n".join(upward)


def test_every_package_is_installed() -> None:
    """pyproject's package list names every package under ``synth/`` (a forgotten one is not shipped)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {_module_name(p.parent / "__init__.py") for p in PACKAGE.rglob("__init__.py")}
    assert on_disk - listed == set(), f"packages missing from pyproject: {sorted(on_disk - listed)}"
    mapped = config.get("package-dir", {})
    for package in listed - on_disk:
        assert package in mapped and (ROOT / mapped[package] / "__init__.py").is_file(), package


def test_documents_link_only_inside_the_repository() -> None:
    """README and docs/ link to files that exist in the repository, never outside it (``../``)."""
    import re

    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    checked = 0
    for doc in docs:
        text = doc.read_text()
        assert "../shared" not in text, f"{doc.name} points outside the repository"
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            path = (doc.parent / target).resolve()
            assert path.is_relative_to(ROOT), f"{doc.name}: link {target} leaves the repository"
            assert path.exists(), f"{doc.name}: link {target} names no file"
            checked += 1
    assert checked >= 3  # README links the architecture, the spec and the license


def test_tests_need_nothing_outside_the_repository() -> None:
    """No test reads from a directory beside the checkout (the old ``../shared`` data)."""
    outside = ("parents[1].parent", "../shared", '/ "shared"')
    for path in sorted((ROOT / "tests").glob("*.py")):
        if path.name == "test_layout.py":
            continue
        text = path.read_text()
        assert not [s for s in outside if s in text], path.name


def test_benchmarks_share_one_harness() -> None:
    """Every benchmark script times, captures its environment and writes results/ through
    ``benchmarks/harness.py`` instead of repeating it."""
    repeated = ('/ "results"', "os.getloadavg(", "platform.python_version(", "platform.platform(")
    scripts = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if p.name != "harness.py")
    assert scripts
    for path in scripts:
        text = path.read_text()
        assert "from harness import" in text, f"{path.name} does not use benchmarks/harness.py"
        assert not [s for s in repeated if s in text], f"{path.name} repeats the harness"


def test_readme_tour_reads_files_that_exist() -> None:
    """Every file the README's tour feeds to ``verify``, ``simulate``, ``calibrate`` or ``topo
    import`` is in the repository or written by an earlier tour command (``out/``): a user who
    copies the tour line by line never meets 'does not exist' (it named all_gather_perf.log,
    plan.json and system.xml, which no one had)."""
    import re
    import shlex

    text = (ROOT / "README.md").read_text().replace("\\\n", " ")
    tour = [shlex.split(line.split("#")[0]) for line in text.splitlines()
            if line.startswith("    synth ")]
    read = [args[2] if args[1] in ("verify", "simulate", "calibrate") else args[3]
            for args in tour if args[1] in ("verify", "simulate", "calibrate")
            or args[1:3] == ["topo", "import"]]
    assert len(read) >= 5
    for name in read:
        assert name.startswith("out/") or (ROOT / name).is_file(), f"README tour reads {name}"
    assert not any(re.search(r"\.\./", line) for args in tour for line in args)


def test_sources_cite_files_inside_the_repository() -> None:
    """A source a user sees (``topo show``, docstrings) never names the project's private notes
    folder (``shared/reference/...``), which a clone does not have: the notes live in docs/reference/."""
    paths = [*PACKAGE.rglob("*.py"), *(ROOT / "topologies").glob("*.yaml")]
    offenders = [p.relative_to(ROOT).as_posix() for p in paths if "shared/reference" in p.read_text()]
    assert not offenders, offenders
