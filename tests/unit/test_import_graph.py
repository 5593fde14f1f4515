"""The tree is the architecture: imports run one way, and no module imports itself back.

Every ``import`` of ``orchestrator/`` and ``workloads/`` is read with ``ast`` (nothing is
imported), those inside functions and ``if TYPE_CHECKING:`` blocks too: a lazy import is
still a dependency. Two rules:

- **Layers** (:data:`LAYERS`, highest first): a module imports only from its own layer or a
  lower one. ``orchestrator`` is cut into stage packages (cli -> run -> plan -> predict ->
  results -> sites -> the shared basics at its top), ``workloads`` into the programs, their
  runtime and the pure-Python definitions the orchestrator reads. ``workloads`` never imports
  ``orchestrator``.
- **No cycles** between modules, anywhere (within a layer too).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "workloads")

# Highest first; a module belongs to the first prefix that matches it (longest prefixes are
# listed before the package that holds them). A module imports only from its layer or below.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("commands", ("orchestrator.cli",)),
    ("run", ("orchestrator.run",)),
    ("plan", ("orchestrator.plan",)),
    ("predict", ("orchestrator.predict",)),
    ("results", ("orchestrator.results",)),
    ("sites", ("orchestrator.sites",)),
    ("shared basics", ("orchestrator",)),
    ("workload programs", ()),  # every workloads module not named below
    ("workload runtime", ("workloads.harness", "workloads.data", "workloads.strategies", "workloads.parallel",
                          "workloads.context", "workloads.lm", "workloads.modelbench", "workloads.primitives",
                          "workloads.sparsity", "workloads.trainers")),
    ("workload definitions", ("workloads.registry", "workloads.models", "workloads.layouts", "workloads.shapes",
                              "workloads.flops", "workloads.serving.spec", "workloads")),
)


def _matches(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> int:
    """Index into LAYERS (0 is the top) of a module of orchestrator/ or workloads/."""
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if _matches(module, prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    if best is not None and not (best[0] == len("workloads") and module != "workloads"):
        return best[1]
    if _matches(module, "workloads"):
        return next(i for i, (name, _) in enumerate(LAYERS) if name == "workload programs")
    raise AssertionError(f"{module}: in no layer of LAYERS")


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int]]:
    """(module imported, line) for each import of ours in the file; ``from a import b`` names
    the module ``a.b`` where that is one, else ``a``."""
    is_package = path.name == "__init__.py"
    out: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                out.append((sub if sub in known else source, node.lineno))
    return [(m, line) for m, line in out if m.split(".")[0] in PACKAGES]


def graph() -> dict[str, list[tuple[str, int]]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def layer_violations(edges: dict[str, list[tuple[str, int]]]) -> list[str]:
    bad = []
    for source, targets in edges.items():
        for target, line in targets:
            if layer_of(target) < layer_of(source):
                bad.append(f"{source} (line {line}) imports {target}: "
                           f"{LAYERS[layer_of(source)][0]} may not import from {LAYERS[layer_of(target)][0]}")
    return bad


def cycles(edges: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's algorithm; the graph is small enough to recurse
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w, _ in edges.get(v, []):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or any(t == v for t, _ in edges.get(v, [])):
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer() -> None:
    for name in modules():
        layer_of(name)


def test_imports_run_one_way() -> None:
    bad = layer_violations(graph())
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_no_import_cycles() -> None:
    found = cycles(graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_checks_catch_what_they_are_for() -> None:
    """A graph with an upward import and a cycle is refused (the checks can fail)."""
    edges = {"orchestrator.sites.profiles": [("orchestrator.plan.render", 3)],
             "orchestrator.plan.render": [("orchestrator.plan.resolve", 1)],
             "orchestrator.plan.resolve": [("orchestrator.plan.render", 2)],
             "workloads.gpt2": [("orchestrator.predict.memory", 5)]}
    assert len(layer_violations(edges)) == 2
    assert cycles(edges) == [["orchestrator.plan.render", "orchestrator.plan.resolve"]]
