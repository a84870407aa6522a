"""Shared fixtures and the --slow flag. Nothing GPU-only is imported at collection."""

from __future__ import annotations

import importlib.util
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("slow", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("RNNX_HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", help="run long fuzz and property runs too")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--slow"):
        settings.load_profile("slow")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and workers >= (os.cpu_count() or 1):
        # As many workers as cores: each computes on one thread (ONNX Runtime, torch, numpy's
        # BLAS), in this process and in the CLI processes it starts. Pools sized for the whole
        # machine in every worker wait on each other and made tests 1.3-3x slower.
        from rnnx.blas_threads import ORT_THREADS_ENV

        for name in (ORT_THREADS_ENV, "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(name, "1")
    from rnnx.fileio import WRITTEN_LOG

    # Every ONNX file rnnx writes during the run, in this process or a CLI subprocess, is
    # appended here; the fixture below verifies each one.
    config.rnnx_written_log = Path(tempfile.mkdtemp(prefix="rnnx-written-")) / "written.log"  # type: ignore[attr-defined]
    config.rnnx_written_log.touch()  # type: ignore[attr-defined]
    os.environ[WRITTEN_LOG] = str(config.rnnx_written_log)  # type: ignore[attr-defined]
    config.rnnx_written_tally = {"verified": 0, "skipped": 0, "seconds": 0.0}  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def every_onnx_file_rnnx_writes_verifies(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test, every ONNX file rnnx wrote during it (through export, convert, fuse,
    lower or anything else) must hold nothing that nothing reads, and pass ``rnnx verify`` on its own: it loads, runs in ONNX
    Runtime at several lengths and batches, and each recurrent layer matches the float64
    reference on the inputs it received. Files with no recurrent layer left are skipped."""
    log: Path = request.config.rnnx_written_log  # type: ignore[attr-defined]
    start = log.stat().st_size
    yield
    with open(log, encoding="utf-8") as f:
        f.seek(start)
        written = list(dict.fromkeys(line.strip() for line in f if line.strip()))
    from rnnx.errors import RNNXError
    from rnnx.verify.models import verify_file

    tally = request.config.rnnx_written_tally  # type: ignore[attr-defined]
    started = time.perf_counter()
    for name in written:
        path = Path(name)
        if not path.is_file():
            continue  # removed by the test itself
        dead = _dead(path)
        if dead:
            pytest.fail(f"rnnx wrote {path} with what nothing reads: {dead}")
        try:
            # verify's defaults: batch 1 and 8, and two lengths: the example's (as rnnx export recorded it) and a longer one
            report = verify_file(path, isolated=False)
        except RNNXError as exc:
            # Skipped: a file whose recurrences were all lowered into Scans (their weights are
            # the torch model's, which only --against gives), and float64 recurrences, which
            # ONNX Runtime has no CPU kernel for.
            if "nothing to check" in str(exc) or "does not support double" in str(exc):
                tally["skipped"] += 1
                continue
            pytest.fail(f"rnnx wrote {path}, which rnnx verify cannot check: {exc}")
        tally["verified"] += 1
        tally["seconds"] += time.perf_counter() - started
        started = time.perf_counter()
        if not report.passed:
            pytest.fail(f"rnnx wrote {path}, which fails rnnx verify:\n{report}")


def _dead(path: Path) -> list[str]:
    """What a pass left behind in a file rnnx wrote: initializers, nodes and value_info nothing reads."""
    import onnx

    from rnnx.formats.onnx_prune import prune

    if path.suffix != ".onnx":
        return []
    pruned = prune(onnx.load(str(path), load_external_data=False))
    return [f"initializer {n}" for n in pruned.initializers] + [f"node {n}" for n in pruned.nodes] + [f"value_info {n}" for n in pruned.value_info]


def pytest_sessionfinish(session: pytest.Session) -> None:
    # Under pytest-xdist each worker counts its own files; hand the count to the controller.
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["rnnx_written_tally"] = dict(session.config.rnnx_written_tally)  # type: ignore[attr-defined]


if importlib.util.find_spec("xdist") is not None:  # an xdist hook: pytest refuses unknown hooks without it

    def pytest_testnodedown(node: Any, error: Any) -> None:
        tally = node.config.rnnx_written_tally
        for key, value in getattr(node, "workeroutput", {}).get("rnnx_written_tally", {}).items():
            tally[key] += value


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    tally = getattr(config, "rnnx_written_tally", None)
    if tally and (tally["verified"] or tally["skipped"]):
        terminalreporter.write_line(f"rnnx verify on every ONNX file rnnx wrote: {tally['verified']} verified, {tally['skipped']} that cannot be "
                                    f"checked on their own, {tally['seconds']:.0f} s")


# Parametrized tests whose every case exports or verifies a model (seconds each): the default run
# keeps each one's first cases, in the order they are declared, and --slow runs them all. This
# holds the default run near its 12-minute goal on 2 cores; every kind of case stays in --slow,
# and each function keeps cases in the default run. Other authors' models (test_third_party,
# test_corpus) keep their own batch-1-by-default rule. Function -> cases kept by default.
SAMPLED: dict[str, int] = {
    "tests/exporters/test_export_routes.py::test_exports_and_matches_torch_at_new_shapes": 8,
    "tests/verify/test_drive.py::test_every_convert_layout_is_driven_and_a_planted_bug_fails": 4,
    "tests/verify/test_verify_against_forwards.py::test_verify_calls_the_model_as_it_was_exported": 4,
    "tests/verify/test_whole_model.py::test_exported_model_passes_and_a_planted_layer_is_named": 3,
    "tests/exporters/test_dimension_audit.py::test_verify_against_the_model_code_passes_on_what_rnnx_exported_from_batch_1": 2,
    "tests/exporters/test_dimension_audit.py::test_the_file_takes_every_batch_and_length_the_model_takes": 3,
    "tests/engines/test_bundle.py::test_a_bundle_builds_and_checks_with_the_stand_in_and_every_flag_is_the_targets": 2,
    "tests/exporters/test_export_surface.py::test_traced_and_scripted_files_export_and_match_at_new_shapes": 2,
    "tests/test_shapes_agree.py::test_every_verb_gives_each_dimension_the_same_role": 8,
    "tests/graphs/test_fuse_unbind.py::test_unbind_loop_becomes_one_native_node": 6,
    "tests/formats/test_flax.py::test_linen_tree_read_by_rnnx_matches_flax": 6,
    "tests/graphs/test_reroll_layers.py::test_layers_each_a_python_loop_export_one_loop_each_right_at_new_lengths": 2,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="long run: pass --slow")
    seen: dict[str, int] = {}
    for item in items:
        function = item.nodeid.split("[", 1)[0]
        if function in SAMPLED:
            seen[function] = seen.get(function, 0) + 1
            if seen[function] > SAMPLED[function]:
                item.add_marker(pytest.mark.slow)
        if "slow" in item.keywords:
            item.add_marker(skip)
