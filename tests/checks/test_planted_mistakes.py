"""Every check rnnx runs catches every planted layout mistake, and honest cases pass: a small,
seeded version of benchmarks/planted.py (the helpers are tests/checks/planting.py).

Checks: ``rnnx.export`` (self-check and layer check), ``rnnx verify --against`` model code,
``rnnx convert``, stack-alone ``rnnx verify``, and the rewrite check of ``rnnx fuse`` /
``rnnx lower``. Mistakes: (a) two gates swapped, (b) one gate's R transposed, (c) one bias
dropped, (d) directions swapped, (e) a GRU's reset mode flipped, (f) a 1% scale on one gate's
W rows; each in one layer and one direction. A catch must come from the calibrated rule (the
largest ratio past the multiple), not from the check raising.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnx

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from tests.checks import planting as P  # noqa: E402  (imports torch)

SHORT = {"seq_lens": [1, 9], "batches": [1, 3]}  # the verify checks' shapes here: enough to catch, fast


def mistakes_of(name: str, kinds: tuple[str, ...] | None = None) -> list[Any]:
    planted, _ = P.plan_mistakes(P.FAMILIES[name])
    return [pytest.param(name, m, id=f"{name}-{m.kind}-l{m.layer}") for m in planted if kinds is None or m.kind in kinds]


def assert_caught(outcome: P.Outcome) -> None:
    assert not outcome.error, f"{outcome.check} raised instead of reporting: {outcome.detail}"
    assert outcome.failed, f"{outcome.check} passed {outcome.family} with {outcome.mistake} planted (largest ratio {outcome.ratio})"
    assert outcome.ratio is not None and outcome.ratio > P.MULTIPLE, outcome


def assert_honest(outcome: P.Outcome) -> None:
    assert not outcome.failed, f"{outcome.check} failed an honest {outcome.family}: {outcome.detail}"
    assert outcome.ratio is not None and outcome.ratio <= P.MULTIPLE


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A correct rnnx export of a family (seed 0, init scale): (model, path, proto), made once."""
    cache: dict[str, tuple[Any, Path, Any]] = {}

    def get(name: str) -> tuple[Any, Path, Any]:
        if name not in cache:
            outcome, model, path = P.run_export(P.FAMILIES[name], tmp_path_factory.mktemp(name), keep=True)
            assert_honest(outcome)
            assert path is not None
            cache[name] = (model, path, onnx.load(str(path)))
        return cache[name]
    return get


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A family's torch checkpoint and its correct ``rnnx convert`` output: (source, path)."""
    cache: dict[str, tuple[Path, Path]] = {}

    def get(name: str) -> tuple[Path, Path]:
        if name not in cache:
            family, folder = P.FAMILIES[name], tmp_path_factory.mktemp(name)
            source = P.write_source(family, family.make(0), folder, "s0")
            outcome = P.run_convert(family, source, folder / "good.onnx")
            assert_honest(outcome)
            cache[name] = (source, folder / "good.onnx")
        return cache[name]
    return get


# --- the planting itself ---------------------------------------------------------------------


def _initializers(proto: Any) -> dict[str, np.ndarray]:
    return {i.name: onnx.numpy_helper.to_array(i) for i in proto.graph.initializer}


@pytest.mark.parametrize("name", ["lstm2bi", "gru2bi", "rnn_relu"])
def test_the_writer_and_the_file_plant_the_same_mistake(name: str, converted: Any, tmp_path: Path) -> None:
    """rnnx's writer, patched on canonical weights, and the file planter, on ONNX's gate order
    spelled out independently, make the same file; and each mistake changes it."""
    family = P.FAMILIES[name]
    source, good = converted(name)
    proto = onnx.load(str(good))
    for m in P.plan_mistakes(family)[0]:
        by_file = P.plant_file(proto, m, family.cell)
        out = tmp_path / "planted.onnx"
        with P.planted_writers(m):
            P.run_convert(family, source, out, check=False)
        by_writer = onnx.load(str(out))
        out.unlink()  # a planted file: not one for the suite's verify of every written file
        a, b, c = _initializers(by_file), _initializers(by_writer), _initializers(proto)
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{m.label}: {key}")
        attrs = [{a.name: onnx.helper.get_attribute_value(a) for a in P.native_node(model, m.layer).attribute}
                 for model in (by_file, by_writer, proto)]
        assert attrs[0] == attrs[1], m.label
        changed = any(not np.array_equal(a[k], c[k]) for k in a) or attrs[0] != attrs[2]
        assert changed, f"{m.label} changes nothing in {name}"


def test_mistakes_planned_and_skipped() -> None:
    planned, skipped = P.plan_mistakes(P.FAMILIES["lstm_proj"])
    assert dict(skipped)["transpose_r"].startswith("R is hidden x proj")
    assert {m.kind for m in planned} == {"swap", "drop_bias", "scale"}
    assert [m.layer for m in planned if m.kind == "swap"] == [1, 0]
    planned, _ = P.plan_mistakes(P.FAMILIES["gru2bi"])
    assert {m.kind for m in planned} == set(P.KINDS)
    assert {(m.layer, m.direction) for m in planned if m.kind not in ("swap_directions", "reset_flip")} == {(1, "reverse"), (0, "reverse")}


# --- each check on each planted mistake --------------------------------------------------------


def _split(fast: list[Any], families: list[str]) -> list[Any]:
    """``fast`` as they are, then every other mistake of ``families`` marked slow."""
    ids = {p.id for p in fast}
    return fast + [pytest.param(*p.values, id=p.id, marks=pytest.mark.slow) for f in families for p in mistakes_of(f) if p.id not in ids]


def _one_of_each_kind(families: list[str]) -> list[Any]:
    """The first planting of each mistake kind over ``families``, in order."""
    seen: set[str] = set()
    out = []
    for f in families:
        for p in mistakes_of(f):
            if p.values[1].kind not in seen:
                seen.add(p.values[1].kind)
                out.append(p)
    return out


# convert: one planting of each kind in the default run (the stacks share one writer), the rest with --slow
@pytest.mark.parametrize("name, mistake", _split(_one_of_each_kind(list(P.STACKS)), list(P.STACKS)))
def test_convert_catches(name: str, mistake: P.Mistake, converted: Any, tmp_path: Path) -> None:
    family = P.FAMILIES[name]
    source, _ = converted(name)
    out = tmp_path / "planted.onnx"
    outcome = P.run_convert(family, source, out, mistake)
    assert_caught(outcome)
    assert not out.exists(), "a failed convert wrote its output"


# export: every kind, in a stack and in whole models whose heads shrink errors (the 1% scale
# behind a softmax is the mildest measured); the export is the slowest check (a failed one tries
# every route), so three run by default and the other kinds, layers and families with --slow
EXPORT = _split([p for p in mistakes_of("lstm2bi") if p.values[1].layer == 1 and p.values[1].kind == "swap"][:1]
                + mistakes_of("tagger", ("reset_flip",)) + mistakes_of("softmax_head", ("scale",)), list(P.FAMILIES))


@pytest.mark.parametrize("name, mistake", EXPORT)
def test_export_catches(name: str, mistake: P.Mistake, tmp_path: Path) -> None:
    outcome, _, written = P.run_export(P.FAMILIES[name], tmp_path, mistake)
    assert_caught(outcome)
    assert written is None and not list(tmp_path.glob("*.onnx")), "a failed export wrote its file"


# every kind once (a stack, and a whole model for the reset flip and the mildest, the scale); the rest with --slow
@pytest.mark.parametrize("name, mistake", _split([p for p in mistakes_of("lstm2bi") if p.id not in ("lstm2bi-swap-l0", "lstm2bi-swap_directions-l1")]
                                                 + mistakes_of("tagger", ("reset_flip", "scale")), list(P.FAMILIES)))
def test_verify_against_and_rewrite_check_catch(name: str, mistake: P.Mistake, exported: Any, tmp_path: Path) -> None:
    """The correct export with the mistake planted in its file: ``rnnx verify --against`` the
    model code and the rewrite check (the file as a rewrite of the correct one) both fail."""
    family = P.FAMILIES[name]
    model, good, proto = exported(name)
    bad, how = P.planted_export_file(family, model, good, mistake, tmp_path / "writer.onnx")
    path = P.save(bad, tmp_path / "planted.onnx")
    assert_caught(P.run_verify_against(family, model, path, mistake.label, mistake.kind, how, **SHORT))
    assert_caught(P.run_rewrite(family, proto, bad, mistake.label, mistake.kind, how))


@pytest.mark.parametrize("name, mistake", _split([p for p in mistakes_of("lstm2bi") if p.values[1].layer == 1]
                                                 + mistakes_of("gru2bi", ("reset_flip",)) + mistakes_of("lstm_proj", ("scale",)), P.STACKS))
def test_verify_stack_catches(name: str, mistake: P.Mistake, converted: Any, tmp_path: Path) -> None:
    family = P.FAMILIES[name]
    source, good = converted(name)
    bad, how = P.planted_convert_file(family, source, good, mistake, tmp_path / "writer.onnx")
    path = P.save(bad, tmp_path / "planted.onnx")
    assert_caught(P.run_verify_stack(family, source, path, mistake.label, mistake.kind, how, **SHORT))


@pytest.mark.parametrize("name, mistake", _split(mistakes_of("lstm2bi", ("swap",))[1:] + mistakes_of("tagger", ("reset_flip",)), ["lstm2bi", "tagger", "forecaster"]))
def test_the_exporter_planted_makes_the_planted_file(name: str, mistake: P.Mistake, exported: Any, tmp_path: Path) -> None:
    """rnnx.export with its writer planted (check off) writes what the file planter makes of the
    correct export: the exporter numbers layers within their torch module, as the mistakes do."""
    family = P.FAMILIES[name]
    model, good, proto = exported(name)
    out = tmp_path / "planted.onnx"
    with P.planted_writers(mistake):
        rnnx.export(model, family.inputs(12, 3, 0), out, check=False)
    by_writer = onnx.load(str(out))
    out.unlink()  # a planted file: not one for the suite's verify of every written file
    by_file = P.plant_file(proto, mistake, family.cell)
    a, b = _initializers(by_file), _initializers(by_writer)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=f"{mistake.label}: {key}")
    attrs = [{x.name: onnx.helper.get_attribute_value(x) for x in P.native_node(m, mistake.layer).attribute} for m in (by_file, by_writer)]
    assert attrs[0] == attrs[1], mistake.label


# --- honest cases -------------------------------------------------------------------------------


@pytest.mark.parametrize("name, seed, scale, T, B", [
    pytest.param("ctc", 3, 1.5, 1, 1, id="ctc-T1-B1-x1.5"),
    pytest.param("forecaster", 4, 1.0, 40, 2, id="forecaster-T40-B2", marks=pytest.mark.slow),
    pytest.param("lstm_proj", 5, 1.5, 9, 1, id="lstm_proj-T9-B1-x1.5", marks=pytest.mark.slow),
    pytest.param("tagger", 6, 1.5, 200, 1, id="tagger-T200-B1-x1.5", marks=pytest.mark.slow),
])
def test_honest_export_verify_and_lower_pass(name: str, seed: int, scale: float, T: int, B: int, tmp_path: Path) -> None:
    family = P.FAMILIES[name]
    outcome, model, path = P.run_export(family, tmp_path, seed=seed, scale=scale, T=T, B=B, keep=True)
    assert_honest(outcome)
    assert path is not None
    assert_honest(P.run_verify_against(family, model, path, seq_lens=[1, 23], batches=[1, 4], seed=seed))
    original = onnx.load(str(path))
    rewritten = P.lowered(original)
    if rewritten is not None:
        assert_honest(P.run_rewrite(family, original, rewritten, seed=seed))


@pytest.mark.parametrize("name", P.STACKS)
def test_honest_convert_and_verify_pass(name: str, tmp_path: Path) -> None:
    family = P.FAMILIES[name]
    for seed, scale, seq_lens, batch_first in [(7, 1.0, False, False), (8, 1.5, True, True)]:
        source = P.write_source(family, family.make(seed, scale), tmp_path, f"s{seed}")
        out = tmp_path / f"s{seed}.onnx"
        assert_honest(P.run_convert(family, source, out, seq_lens=seq_lens, batch_first=batch_first))
        if not seq_lens:
            assert_honest(P.run_verify_stack(family, source, out, seq_lens=[1, 30], batches=[1, 2], seed=seed))
