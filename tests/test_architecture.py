"""The package's shape: layers that point one way, no import cycles, no private names imported
across modules, short functions in compile/, and a CLI that starts without torch or TVM.

The imports are read from the source (ast), lazy imports inside functions included: a lazy
import is still a dependency, only a cheaper one.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "tvmbench"

# Lowest first. A module may import modules of its own layer or of a lower one, never a higher
# one. The data flow: spec -> model -> compiled artifact (tuned) -> measurement -> result -> report.
LAYERS = [
    ("core", ["tvmbench.version", "tvmbench.errors", "tvmbench.paths", "tvmbench.files", "tvmbench.streams", "tvmbench.plots",
              "tvmbench.sqlfile",
              "tvmbench.rpc", "tvmbench.emulator", "tvmbench.targets", "tvmbench.tvm_exec"]),
    ("models", ["tvmbench.models"]),
    ("compile", ["tvmbench.compile"]),
    ("tune", ["tvmbench.tuning"]),
    ("backends", ["tvmbench.backends"]),
    ("measure", ["tvmbench.measure"]),
    ("profile", ["tvmbench.profiling"]),
    ("results", ["tvmbench.results"]),
    ("api", ["tvmbench.api", "tvmbench.comparison", "tvmbench.doctor", "tvmbench"]),
    ("cli", ["tvmbench.cli", "tvmbench.seed_scripts"]),
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["tvmbench", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(module imported, names taken from it, line) for every tvmbench import of a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names if a.name.startswith("tvmbench")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            if not base.startswith("tvmbench"):
                continue
            names = [a.name for a in node.names]
            submodules = [n for n in names if f"{base}.{n}" in MODULES]
            found += [(f"{base}.{n}", [], node.lineno) for n in submodules]
            rest = [n for n in names if n not in submodules]
            if rest or not submodules:
                found.append((base, rest, node.lineno))
    return found


def _layer(module: str) -> int:
    best, index = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, index = len(p), i
    assert index is not None, f"{module} is in no layer: add it to LAYERS"
    return index


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def test_layers_point_one_way():
    wrong = [f"{name}:{line} imports {target} ({LAYERS[_layer(target)][0]} is above {LAYERS[_layer(name)][0]})"
             for name, imports in GRAPH.items() for target, _, line in imports
             if target in MODULES and _layer(target) > _layer(name)]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    edges = {name: sorted({t for t, _, _ in imports if t in MODULES and t != name}) for name, imports in GRAPH.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in edges[node]:
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [node, nxt]) if nxt in stack else f"{node} -> {nxt}")
            elif nxt not in state:
                visit(nxt, stack + [node])
        state[node] = 2

    for name in sorted(edges):
        if name not in state:
            visit(name, [])
    assert not cycles, "\n".join(cycles)


def test_no_private_name_is_imported_from_another_module():
    private = [f"{name}:{line} imports {n} from {target}" for name, imports in GRAPH.items()
               for target, names, line in imports for n in names if n.startswith("_") and not n.endswith("__") and target != name]
    assert not private, "\n".join(private)


def test_functions_in_compile_are_a_screen_long():
    long = []
    for path in (PACKAGE / "compile").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > 80:
                long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} "
                            f"({node.end_lineno - node.lineno + 1} lines)")
    assert not long, "\n".join(long)
    assert len((PACKAGE / "compile" / "pipeline.py").read_text().splitlines()) < 250


def test_no_module_defines_a_top_level_name_twice():
    """A second ``def`` of a name silently replaces the first for every caller, tests included
    (a test helper once did, and ruff's F811 let it pass because the first had been used)."""
    root = PACKAGE.parents[1]
    twice = []
    for path in [*PACKAGE.rglob("*.py"), *(root / "tests").glob("*.py"), *(root / "benchmarks").glob("*.py")]:
        seen: dict[str, int] = {}
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if node.name in seen:
                    twice.append(f"{path.relative_to(root)}:{node.lineno} {node.name} (first at {seen[node.name]})")
                seen.setdefault(node.name, node.lineno)
    assert not twice, "\n".join(twice)


# What a run's main process does before and after its workers, a PyTorch worker's info unpickled as
# it receives it: it measures nothing, and importing TVM (which imports torch) cost it 4-8 s (the
# target's facts are kept: ``targets._tvm_fact``).
MAIN_PROCESS = """
import pickle
from tvmbench import api
from tvmbench.api import run_config
from tvmbench.measure.runner import backend_config
from tvmbench.models import ModelOptions
cfg = run_config("resnet18", ModelOptions(), api.target("auto"), ["tvm", "pytorch"])
backend_config(cfg)
pickle.loads(PICKLED)
"""


@pytest.mark.parametrize("code", ["import tvmbench.cli; tvmbench.cli.build_parser()", "import tvmbench",
                                  "MAIN_PROCESS"])
def test_the_cli_and_the_api_import_neither_torch_nor_tvm(code):
    if code == "MAIN_PROCESS":
        import pickle

        from tvmbench import api
        from tvmbench.backends import BackendConfig
        from tvmbench.backends.pytorch import PyTorchBackend
        from tvmbench.models import ModelOptions, load_model

        api.target("auto")  # (the facts the subprocess reads: kept in the cache folder on the first ask)
        backend = PyTorchBackend(BackendConfig(target=api.target("llvm"), threads=1))
        backend.prepare(load_model(str(Path(__file__).with_name("mlp_model.py")) + ":build", ModelOptions()))
        code = MAIN_PROCESS.replace("PICKLED", repr(pickle.dumps(backend.info))).replace("\n", "; ").strip("; ")
    out = subprocess.run([sys.executable, "-c", f"{code}; import sys; print(sorted(m for m in sys.modules "
                          "if m.split('.')[0] in ('torch', 'tvm', 'transformers', 'onnx')))"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
