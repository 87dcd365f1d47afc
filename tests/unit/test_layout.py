"""The package's shape: the folders are the layers and imports only run down them, no import
cycle anywhere, the rank side stands alone, and only the backends and their template folders
know which scheduler a job uses."""
from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "hpctrain"


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for all the tests here (which only read it)."""
    return ast.parse(path.read_text())


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every hpctrain module this one imports, at the top or deferred inside a function, by an
    import statement or through importlib.import_module (a registry's lookup)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = _tree(path)
    # What `if TYPE_CHECKING:` imports is never imported.
    unused = {id(n) for node in ast.walk(tree)
              if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
              for statement in node.body for n in ast.walk(statement)}
    # What a registry can hand to import_module: the strings of this file that name a module.
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    for node in ast.walk(tree):
        targets: list[str] = []
        if id(node) in unused:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call) and node.args and \
                getattr(node.func, "id", getattr(node.func, "attr", None)) == "import_module":
            # import_module(".x", __name__) resolves against the package named by its second
            # argument; a computed name (the registries) against the calling package.
            anchor = name if len(node.args) > 1 and ast.unparse(node.args[1]) == "__name__" else package
            first = node.args[0]
            if isinstance(first, ast.Constant):
                targets = [anchor + first.value if first.value.startswith(".") else first.value]
            else:
                targets = [f"{anchor}.{s}" for s in strings if f"{anchor}.{s}" in known]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            # Importing a module runs its packages' __init__ first; the packages this module
            # sits in are already running by then, so they are no edge.
            while target:
                if target != name and not name.startswith(target + "."):
                    found.add(target)
                target = target.rpartition(".")[0]
    return found


@functools.lru_cache(maxsize=None)
def _graph() -> dict[str, frozenset[str]]:
    """Each module -> the hpctrain modules it imports."""
    mods = _modules()
    return {name: frozenset(_imports(name, path, set(mods))) for name, path in mods.items()}


def test_no_import_cycle():
    graph = _graph()
    # The registries' lookups are edges too (a cycle through one is as real as any).
    assert {"hpctrain.backends.submitit", "hpctrain.backends.slurm.login"} <= graph["hpctrain.backends"]
    assert "hpctrain.libraries.rsl_rl" in graph["hpctrain.libraries"]
    assert "hpctrain.submission" in graph["hpctrain"]
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    sys.setrecursionlimit(10000)
    for name in sorted(graph):
        if name not in state:
            visit(name)


# The layers, lowest first: a module may import its own layer and those below it, never one
# above. docs/architecture.md shows the same order; the top-level modules are layers of their own.
LAYERS = ["errors datafiles", "rank", "rendering", "schema", "libraries", "runs", "backends",
          "follow", "job", "search", "submission interactive", "doctor", "cli __main__"]


def _layer(module: str) -> int:
    first = module.split(".")[1] if "." in module else ""
    for i, names in enumerate(LAYERS):
        if first in names.split():
            return i
    raise AssertionError(f"{module} is in no layer: add its folder to LAYERS (and the docs)")


def test_imports_run_down_the_layers():
    """The tree is the layer diagram: no module imports one of a higher layer. The package's own
    __init__ is the API face (it loads its names on first use) and stands above every layer."""
    up = []
    for name, imported in sorted(_graph().items()):
        if name == "hpctrain":
            continue
        for target in imported - {"hpctrain"}:
            if _layer(target) > _layer(name):
                up.append(f"{name} ({LAYERS[_layer(name)]}) imports {target} ({LAYERS[_layer(target)]})")
    assert not up, "imports running up the layers:\n" + "\n".join(up)


def test_the_architecture_page_shows_the_layers_and_every_folder():
    """docs/architecture.md's layer line is LAYERS, in order, and its tree names every module at
    the top and every folder: one added without the page fails here, not in a newcomer's
    reading (search/ went unmentioned for a while)."""
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    line = re.search(r"`tests/unit/test_layout.py`:\n(.*?)\. A module", page, re.S).group(1)
    assert [layer.replace(",", " ").split() for layer in line.split("<")] == [l.split() for l in LAYERS]
    tree = page[page.index("```text\nhpctrain/"):]
    tree = tree[:tree.index("```", 3)]
    top = [p.name for p in PACKAGE.glob("*.py")]
    folders = [p.parent.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("__init__.py")
               if p.parent != PACKAGE]
    missing = [n for n in top if n not in tree] + \
        [f for f in folders if not re.search(rf"(^  |[ (]){re.escape(f.split('/')[-1])}/ ", tree, re.M)]
    assert not missing, f"docs/architecture.md's tree does not name: {missing}"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_uses(path: Path) -> list[str]:
    """Where this module reaches another hpctrain module's private names: `from .x import _y`,
    or an attribute through a name it imported from hpctrain (`x._y`, `X._y`, `f(...)._y`)."""
    tree = _tree(path)
    imported: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "hpctrain"):
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{node.lineno}: {ast.unparse(node)}")
                imported.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            imported.update(a.asname or "hpctrain" for a in node.names if a.name.split(".")[0] == "hpctrain")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = node.value
            while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
                root = root.func if isinstance(root, ast.Call) else root.value
            if isinstance(root, ast.Name) and root.id in imported:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_uses_another_modules_private_names():
    """A name with one leading underscore is its module's own. What two modules share gets a
    public name and a docstring, so that whoever changes it knows it has other users."""
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{use}"
                 for path in sorted(PACKAGE.rglob("*.py")) for use in _private_uses(path)]
    assert not offenders, "private names used across modules:\n" + "\n".join(offenders)


def test_the_private_names_check_sees_each_form(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from ..rank.during import sampler\nfrom hpctrain.x import _y, z\n"
                      "import hpctrain.runs.records\nfrom .local import LocalBackend, backend\n"
                      "sampler._a; z._b(); LocalBackend._c; backend('x')._d; hpctrain.runs._e\n"
                      "self._f; other._g; sampler.__name__\n")
    assert sorted(u.split(": ", 1)[1] for u in _private_uses(module)) == sorted([
        "from hpctrain.x import _y, z", "sampler._a", "z._b", "LocalBackend._c",
        "backend('x')._d", "hpctrain.runs._e"])


def test_top_level_stays_small():
    """Concerns live in folders; the top level holds the entry points and the lowest modules."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 12, top


def test_bootstrap_json_is_exactly_the_rank_config(home):
    """job/plan.py writes bootstrap.json as a dict (render need not import the records module);
    it has exactly RankConfig's fields, each set."""
    import dataclasses

    from hpctrain.job.load import load_job
    from hpctrain.job.plan import make_plan
    from hpctrain.rank.records import RankConfig
    plan = make_plan(load_job({"name": "x", "script": "t.py"}, site="localcluster"), "/r")
    fields = {f.name for f in dataclasses.fields(RankConfig)} - {"extra"}
    assert set(plan.bootstrap) == fields
    assert RankConfig(**plan.bootstrap).to_dict() == plan.bootstrap


# What the rank side may import inside a function: what the run's own environment has where that
# function runs (a hook in a rank, rank/after/ under the run's interpreter), never at import.
RUN_LIBRARIES = ("torch", "jax", "numpy", "yaml", "onnx", "onnxscript", "onnxruntime", "rsl_rl",
                 "rl_games", "skrl", "tensordict", "gymnasium")


def test_rank_side_is_stdlib_only_and_self_contained():
    """hpctrain/rank/ is copied into every run and runs under any interpreter: it imports only
    the standard library and its own modules (relatively); torch and jax only inside the
    functions that run where the library already is (a hook, a collective)."""
    stdlib = set(sys.stdlib_module_names)
    for path in (PACKAGE / "rank").rglob("*.py"):
        depth = len(path.relative_to(PACKAGE / "rank").parts)  # 2 in a group's folder
        tree = _tree(path)
        inside = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for n in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level <= depth, f"{path.name} reaches out of rank/: {ast.unparse(node)}"
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) else []
            for mod in names:
                top = mod.split(".")[0]
                if top == "_hpctrain_rank" or (top in RUN_LIBRARIES and id(node) in inside):
                    continue
                assert top in stdlib or top == "__future__", f"{path.name} imports {mod}"


def test_only_backends_know_schedulers():
    """No scheduler comparison outside backends/ and the template roots of each scheduler: not
    a registered scheduler's name compared (==, !=, in, not in, alone or in a tuple), nor a
    `scheduler`/`backend` value compared with anything; the rest asks the backend what it can
    do."""
    from hpctrain.backends import BACKENDS
    names = set(BACKENDS)

    def a_name(node) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(map(a_name, node.elts))

    def a_scheduler(node) -> bool:
        last = node.id if isinstance(node, ast.Name) else \
            node.attr if isinstance(node, ast.Attribute) else ""
        return last in ("scheduler", "backend")

    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if "backends" in path.parts:
            continue
        for node in ast.walk(_tree(path)):
            if not isinstance(node, ast.Compare) or \
                    not all(isinstance(o, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for o in node.ops):
                continue
            sides = [node.left, *node.comparators]
            if any(a_name(n) or a_scheduler(n) for n in sides):
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
    shared = PACKAGE.parent / "templates" / "parts"
    for path in shared.glob("*.j2"):
        text = path.read_text()
        for i, line in enumerate(text.splitlines(), 1):
            tags = " ".join(re.findall(r"{[{%].*?[%}]}", line))
            if re.search(r"scheduler|backend", tags) or re.search(r"\b(srun|sbatch|scontrol|SLURM_\w+)", line):
                offenders.append(f"templates/parts/{path.name}:{i}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_which_runs_a_job_can_wait_for_is_the_backends_answer():
    """job/chains.py asks Backend.waits_for instead of comparing scheduler names: a scheduler with
    dependencies waits for its own runs only, one without waits for none."""
    from hpctrain.backends import BACKENDS, backend_class
    for name in BACKENDS:
        cls = backend_class(name)
        assert {o for o in BACKENDS if cls.waits_for(o)} == ({name} if cls.dependencies else set())
    assert backend_class("slurm").waits_for("slurm") and not backend_class("slurm").waits_for("ssh")


# The rank side's folders, by when their code runs; what every group may use stays at rank/.
RANK_GROUPS = {  # group -> the groups its modules may import (besides rank/'s own modules)
    "before": {"before", "during", "end"},  # the bootstrap installs the hooks and the stop path
    "during": {"during", "end"},  # a hook saves and stops through the end's modules
    "end": {"end"},  # the end reads records, never re-runs a check
    "after": {"after"},  # after training (an evaluation's play, an export): jobs of their own, no hook
}
RANK_SHARED = {"__init__", "__main__", "records", "tools", "printable", "phases", "progress", "ddp"}


def test_rank_side_is_grouped_by_when_it_runs():
    """rank/ is before/ (bootstrap, preflight, checks), during/ (hooks, progress, watch, sampler,
    culprit), end/ (stop, ending, recovery, notify) and after/ (evaluate: a job derived from a
    trained run): a module imports only its own group, the
    groups that run after it, and the shared records, tools and API at rank/ itself, which import
    no group (but __main__, the dispatcher)."""
    rank = PACKAGE / "rank"
    for path in rank.rglob("*.py"):
        parts = path.relative_to(rank).parts
        if len(parts) == 1:
            assert path.stem in RANK_SHARED, f"rank/{path.name}: put it in one of {sorted(RANK_GROUPS)}"
            allowed = set(RANK_GROUPS) if path.stem == "__main__" else set()
        else:
            assert len(parts) == 2 and parts[0] in RANK_GROUPS, f"rank/{'/'.join(parts)}"
            allowed = RANK_GROUPS[parts[0]]
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and node.level:
                up = node.level - (len(parts) - 1)  # 1: from rank/ itself
                target = (node.module or "").split(".")[0] if up == 1 else parts[0]
                if up == 1 and not node.module:  # from . import x (at rank/) / from .. import x
                    targets = [a.name for a in node.names]
                else:
                    targets = [target]
                for t in targets:
                    assert t not in RANK_GROUPS or t in allowed, \
                        f"rank/{'/'.join(parts)} imports {t}/: {ast.unparse(node)}"
