"""The layering, checked: each layer imports only the ones beneath it (the contract in
.importlinter, run by import-linter), no package's modules import each other in a cycle,
rnnx's own imports sit at the top of their modules (none hidden inside a function, where
they used to hide cycles), and ``import rnnx`` stays light."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contract_holds() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.skip("import-linter is not installed (it comes with the test extra)")
    done = subprocess.run([str(lint), "--config", str(ROOT / ".importlinter")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


# What may be imported only where needed: optional frameworks, and libraries heavy enough
# that `import rnnx` and `rnnx --help` would pay for them at every start.
DEFERRED = {"torch", "keras", "jax", "jaxlib", "tensorflow", "tensorrt", "polygraphy", "cupy", "matplotlib", "h5py",
            "onnx", "onnxruntime", "onnx_ir", "onnxscript", "safetensors", "tqdm", "threadpoolctl"}


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST, module: str) -> tuple[set[str], list[tuple[int, str, str]]]:
    """The modules ``module`` imports at its top level, and (line, function, module) of those
    it imports inside functions."""
    top: set[str] = set()
    inner: list[tuple[int, str, str]] = []

    def names(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(module.split(".")[: len(module.split(".")) - node.level + (1 if module.endswith("__init__") else 0)] + [base]).strip(".")
            return [base] + [f"{base}.{a.name}" for a in node.names]
        return []

    def visit(node: ast.AST, inside: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            scope = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else inside
            for name in names(child):
                (inner.append((child.lineno, inside, name)) if inside else top.add(name))
            visit(child, scope)

    visit(tree, None)
    return top, inner


def _deferred_modules(root: Path) -> tuple[set[str], dict[str, list[tuple[int, str, str]]]]:
    """rnnx's modules that load a deferred library when imported (directly or through
    another rnnx module), and every module's imports inside functions."""
    tops, inners = {}, {}
    for path in sorted((root / "rnnx").rglob("*.py")):
        name = _module_name(path, root)
        tops[name], inners[name] = _imports(ast.parse(path.read_text()), name)
    heavy = {m for m, t in tops.items() if any(i.split(".")[0] in DEFERRED for i in t)}
    grew = True
    while grew:
        grew = False
        for m, t in tops.items():
            if m not in heavy and any(i in heavy for i in t):
                heavy.add(m)
                grew = True
    return heavy, inners


def hidden_rnnx_imports(root: Path) -> list[str]:
    heavy, inners = _deferred_modules(root)
    hidden = []
    for module, found in inners.items():
        if module == "rnnx":  # the package's lazy entry points (PEP 562 __getattr__): what keeps `import rnnx` light
            continue
        for line, function, target in found:
            if target.split(".")[0] == "rnnx" and target in inners and target not in heavy and target != "rnnx":
                hidden.append(f"{module}:{line} in {function}(): imports {target}, which loads no deferred library")
    return sorted(set(hidden))


def test_rnnx_imports_are_at_module_top() -> None:
    """An rnnx import inside a function is allowed only where the module it imports loads an
    optional framework or a heavy library; anywhere else it would only hide a cycle."""
    hidden = hidden_rnnx_imports(ROOT)
    assert not hidden, "rnnx imports inside functions that belong at the top:\n" + "\n".join(hidden)


def test_the_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "rnnx").mkdir()
    (tmp_path / "rnnx" / "__init__.py").write_text("")
    (tmp_path / "rnnx" / "light.py").write_text("import numpy\n")
    (tmp_path / "rnnx" / "framework.py").write_text("import torch\n")
    (tmp_path / "rnnx" / "user.py").write_text("def f():\n    from rnnx import light\n    from rnnx.framework import x\n")
    assert hidden_rnnx_imports(tmp_path) == ["rnnx.user:2 in f(): imports rnnx.light, which loads no deferred library"]


def test_import_rnnx_loads_no_framework() -> None:
    """``import rnnx`` is numpy and rnnx's own modules: what the command line pays at every start."""
    code = "import sys, rnnx; print(' '.join(m for m in ('onnx', 'onnxruntime', 'torch', 'keras', 'jax', 'tensorrt', 'onnx_ir') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"import rnnx loaded {done.stdout.strip()}"


def test_the_entry_points_load_on_first_use() -> None:
    code = ("import sys, rnnx; light = 'rnnx.formats' not in sys.modules; "
            "from rnnx import load, export; import rnnx.api; "
            "print(light, load is rnnx.api.load, export is rnnx.api.export, sorted(set(rnnx.__all__) - set(dir(rnnx))))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True", "[]"]


MAX_LINES = 450
DATA_TABLES = {"rnnx/engines/trtexec_flags.py", "rnnx/engines/jetpack.py"}  # cited data, no logic


def long_modules(root: Path) -> list[str]:
    """rnnx's modules over MAX_LINES that are neither data tables nor say in their docstring why
    they are one module ("One module, though ...")."""
    found = []
    for path in sorted((root / "rnnx").rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        text = path.read_text()
        if text.count("\n") <= MAX_LINES or relative in DATA_TABLES:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if "One module, though" not in doc:
            found.append(f"{relative}: {text.count(chr(10))} lines")
    return found


def test_modules_stay_small_or_say_why() -> None:
    assert not long_modules(ROOT), "modules over 450 lines that do not say why:\n" + "\n".join(long_modules(ROOT))


def test_the_size_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "rnnx").mkdir()
    (tmp_path / "rnnx" / "big.py").write_text('"""A module."""\n' + "x = 1\n" * 500)
    (tmp_path / "rnnx" / "said.py").write_text('"""A module.\n\nOne module, though long: one idea."""\n' + "x = 1\n" * 500)
    assert long_modules(tmp_path) == ["rnnx/big.py: 501 lines"]


# --- one reading of a file's shapes -------------------------------------------------------------
# Which role each dimension plays is read from a file in one module: the wiring tracer is called
# there, and the export record's roles and example are read there. rnnx's exporters write the
# record (and read back the one they have just written), and formats/onnx_metadata is the record's
# format (it bounds what a file may claim, and rnnx inspect prints the record as written); every
# other verb asks rnnx.shapes.file_dims, so that a fix to the reading reaches them all.
READERS = {"rnnx/shapes/file_dims.py", "rnnx/formats/onnx_metadata.py"}
WRITERS = "rnnx/exporters/"


def private_readings(root: Path) -> list[str]:
    """Lines outside the reader (and the exporters) that trace the wiring or read the record's
    roles or example themselves."""
    found = []
    for path in sorted((root / "rnnx").rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative in READERS or relative.startswith(WRITERS):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"(?<!def )\baxis_roles\(|\.get\(\"(roles|example)\"\)|\[\"(roles|example)\"\]", line):
                found.append(f"{relative}:{number}: {line.strip()}")
    return found


def test_roles_are_read_from_a_file_in_one_place() -> None:
    assert private_readings(ROOT) == []


def test_the_one_reading_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "rnnx" / "engines").mkdir(parents=True)
    (tmp_path / "rnnx" / "engines" / "own.py").write_text('roles = (export or {}).get("roles") or {}\n')
    (tmp_path / "rnnx" / "exporters").mkdir()
    (tmp_path / "rnnx" / "exporters" / "record.py").write_text('export["roles"] = naming.roles\n')
    assert private_readings(tmp_path) == ['rnnx/engines/own.py:1: roles = (export or {}).get("roles") or {}']


# --- one check harness ----------------------------------------------------------------------------
# Every verb's check is made of rnnx.check's parts: one row type (a run's output against its
# truth), one case type, one judge (the calibrated-or-fixed decision), and runners from the
# engines. A second row or case class, a judgement made beside the judge, or a session built by
# a verb itself is where a check starts to pass without checking, so each is refused here.
ROW_HOME = "rnnx/check/judge.py"
CASE_HOME = "rnnx/check/case.py"
JUDGE_HOMES = ("rnnx/check/", "rnnx/tolerance.py")
# A comparison below rnnx.check, which its layer cannot import: formats/flax checks the file it
# writes against the float64 reference on both sides (its own rounding only), before convert's check.
JUDGED_BELOW = {"rnnx/formats/flax.py"}
SESSION_HOME = "rnnx/engines/"
# ErrorStats' statistics, and the names the reports print them by: a class holding two of them
# as its own fields is a second row.
STATISTICS = {"max_abs", "mean_abs", "median_abs", "quantile_abs", "p99_abs", "max_rel", "mean_rel", "median_rel", "quantile_rel", "p99_rel"}
JUDGES = {"compare_arrays", "compare_calibrated"}


def _called(node: ast.Call) -> str:
    return node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id if isinstance(node.func, ast.Name) else ""


def harness_breaches(root: Path) -> list[str]:
    """Classes beside rnnx.check's Row and Case that play their part, calls to the comparator
    outside the judge, and ONNX Runtime sessions built outside the engines."""
    found: list[tuple[str, int, str]] = []
    for path in sorted((root / "rnnx").rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                own = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
                if relative != ROW_HOME and (node.name.endswith("Row") or (len(own & STATISTICS) >= 2 and node.name != "ErrorStats")):
                    found.append((relative, node.lineno, f"class {node.name}: a second row type (rnnx.check.Row)"))
                if relative != CASE_HOME and node.name.endswith("Case"):
                    found.append((relative, node.lineno, f"class {node.name}: a second case type (rnnx.check.Case)"))
            elif isinstance(node, ast.Call) and _called(node) in JUDGES and not relative.startswith(JUDGE_HOMES) and relative not in JUDGED_BELOW:
                found.append((relative, node.lineno, f"calls {_called(node)} beside the judge (rnnx.check.judge)"))
            elif isinstance(node, ast.Call) and _called(node) == "InferenceSession" and not relative.startswith(SESSION_HOME):
                found.append((relative, node.lineno, "builds an ONNX Runtime session outside rnnx/engines/"))
    return [f"{relative}:{line}: {what}" for relative, line, what in sorted(found)]


def test_every_check_is_made_of_the_one_harness() -> None:
    assert harness_breaches(ROOT) == []


def test_the_harness_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "rnnx" / "check").mkdir(parents=True)
    (tmp_path / "rnnx" / "check" / "judge.py").write_text("class Row:\n    labels: dict\n")
    (tmp_path / "rnnx" / "check" / "case.py").write_text("class Case:\n    name: str\n")
    (tmp_path / "rnnx" / "tolerance.py").write_text("class ErrorStats:\n    max_abs: float\n    max_rel: float\n"
                                                    "def compare_arrays(a, b):\n    return compare_calibrated(a, b)\n")
    (tmp_path / "rnnx" / "verb.py").write_text(
        "import onnxruntime as ort\nfrom rnnx.tolerance import compare_arrays\n\n"
        "class OutputRow:\n    name: str\n\n"
        "class Worst:\n    output: str\n    max_abs: float\n    p99_abs: float\n\n"
        "class Held:\n    output: str\n    max_abs: float\n\n"
        "class ShapeCase:\n    name: str\n\n"
        "def check(a, b):\n    session = ort.InferenceSession(b'')\n    return compare_arrays(a, b).passed\n")
    assert harness_breaches(tmp_path) == [
        "rnnx/verb.py:4: class OutputRow: a second row type (rnnx.check.Row)",
        "rnnx/verb.py:7: class Worst: a second row type (rnnx.check.Row)",
        "rnnx/verb.py:16: class ShapeCase: a second case type (rnnx.check.Case)",
        "rnnx/verb.py:20: builds an ONNX Runtime session outside rnnx/engines/",
        "rnnx/verb.py:21: calls compare_arrays beside the judge (rnnx.check.judge)",
    ]
