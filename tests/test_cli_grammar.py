"""One grammar: a flag means the same in every verb that has it, a bad value is a usage error
(exit 2, one line), and a library refusal that names a parameter reaches CLI users as a flag."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights, RNNXError
from rnnx.cli import build_parser, groups, main
from rnnx.cli.flags import FLAGS, VERB_FLAGS, flagged
from rnnx.cli.groups import Option, Renamed
from rnnx.layouts.onnx import DEFAULT_OPSET

DECLARED = [o for o in vars(groups).values() if isinstance(o, Option)]


def _verbs() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _options(verb: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in verb._actions for flag in action.option_strings}


def _meaning(action: argparse.Action) -> tuple[object, ...]:
    return (type(action).__name__, action.dest, action.type, action.default, action.nargs, action.const)


def test_a_flag_means_the_same_in_every_verb() -> None:
    seen: dict[str, tuple[str, tuple[object, ...]]] = {}
    shared = set()
    for name, verb in _verbs().items():
        for flag, action in _options(verb).items():
            if isinstance(action, Renamed) or flag in ("-h", "--help"):
                continue
            if flag in seen:
                shared.add(flag)
                first, meaning = seen[flag]
                assert _meaning(action) == meaning, f"{flag} in {name} differs from {flag} in {first}"
            else:
                seen[flag] = (name, _meaning(action))
            # a verb may offer fewer of a flag's declared choices (bundle's --precision), never other ones
            declared = next((o.settings.get("choices") for o in DECLARED if flag in o.flags), None)
            assert not action.choices or set(action.choices) <= set(declared or action.choices), f"{flag} in {name}"
    # the holder must be able to fail: these are shared by several verbs today
    assert {"--select", "--spec", "--from", "--opset", "--seed", "--atol", "--rtol", "--json", "--max-memory", "--batch-first"} <= shared


def test_bundle_offers_only_the_precisions_it_builds() -> None:
    verbs = _verbs()
    assert tuple(_options(verbs["bundle"])["--precision"].choices) == ("fp32", "tf32", "fp16")
    assert {"bf16", "int8"} <= set(_options(verbs["build"])["--precision"].choices)
    assert "fp32, tf32, fp16" in " ".join(verbs["bundle"].format_help().split()) or "{fp32,tf32,fp16}" in verbs["bundle"].format_help()


def test_opset_has_one_default_everywhere() -> None:
    having = {name: _options(verb)["--opset"].default for name, verb in _verbs().items() if "--opset" in _options(verb)}
    assert set(having) == {"convert", "export"} and set(having.values()) == {DEFAULT_OPSET}


def test_select_names_a_group_everywhere_and_lowers_node_has_its_own_name() -> None:
    verbs = _verbs()
    for name, verb in verbs.items():
        action = _options(verb).get("--select")
        if action is not None and not isinstance(action, Renamed):
            assert action.metavar == "GROUP", name
    lower = _options(verbs["lower"])
    assert isinstance(lower["--select"], Renamed) and lower["--select"].dest == lower["--node"].dest == "node"
    convert = _options(verbs["convert"])
    assert isinstance(convert["--seq-lens"], Renamed) and convert["--seq-lens"].dest == convert["--seq-lens-input"].dest
    assert _options(verbs["verify"])["--seq-lens"].type.__name__ == "sizes_to_check"


def test_renamed_options_still_work_and_say_their_new_name(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["lower", "m.onnx", "-o", "l.onnx", "--select", "LSTM_0"])
    assert args.node == "LSTM_0" and "--select is now --node" in capsys.readouterr().err
    args = build_parser().parse_args(["convert", "w.pt", "-o", "w.onnx", "--seq-lens"])
    assert args.seq_lens_input is True and "--seq-lens is now --seq-lens-input" in capsys.readouterr().err


def test_every_flag_the_table_names_exists() -> None:
    verbs = _verbs()
    everywhere = {flag for verb in verbs.values() for flag in _options(verb)}
    assert set(FLAGS.values()) - {"--seq-lens"} <= everywhere, set(FLAGS.values()) - everywhere
    for name, table in VERB_FLAGS.items():
        assert set(table.values()) <= set(_options(verbs[name])), name


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["verify", "m.onnx", "--seq-lens", "0"], "argument --seq-lens: expected positive integers, found '0'"),
        (["verify", "m.onnx", "--batch", "1,x"], "argument --batch: expected comma-separated integers"),
        (["verify", "m.onnx", "--backends", "ort,gpu9"], "argument --backends: unknown backend 'gpu9'"),
        (["verify", "m.onnx", "--dtype", "fp8"], "argument --dtype: unknown dtype 'fp8'"),
        (["verify", "m.onnx", "--tol", "gpu=1,2"], "argument --tol: unknown backend 'gpu'"),
        (["verify", "m.onnx", "--dim", "k"], "argument --dim: expected LABEL=SIZE"),
        (["verify", "m.onnx", "--input-map", "x=Q"], "argument --input-map: 'x=Q': expected NAME=ROLE"),
        (["convert", "w.pt", "-o", "x.onnx", "--max-memory", "4X"], "argument --max-memory: '4X': expected a positive size"),
        (["convert", "w.pt", "-o", "x.onnx", "--time-limit", "0"], "argument --time-limit: expected a positive number of seconds"),
        (["convert", "w.pt", "-o", "x.onnx", "--opset", "3"], "argument --opset: expected 13 to"),
        (["convert", "w.pt", "-o", "x.onnx", "--atol", "x"], "argument --atol: 'x': expected a number"),
        (["fuse", "m.onnx", "-o", "f.onnx", "--check-error-stat", "p42"], "argument --check-error-stat: 'p42': expected one of"),
        (["export", "m.py:M", "-o", "x.onnx", "--dynamic", "x"], "argument --dynamic: 'x': expected NAME:DIM[=LABEL]"),
        (["build", "m.onnx", "-o", "m.engine", "--profile", "X:1x2"], "argument --profile: 'X:1x2': expected three shapes"),
    ],
)
def test_a_bad_value_is_a_usage_error_on_one_line(argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and fragment in err[0], err


@pytest.mark.parametrize("verb", sorted(_verbs()))
def test_every_verb_has_help(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([verb, "--help"])
    assert exit_.value.code == 0 and "usage: rnnx " + verb in capsys.readouterr().out


@pytest.mark.parametrize(
    ("verb", "message", "shown"),
    [
        ("convert", "w.pt: 2 recurrent groups ('a', 'b'); pass select=GROUP", "w.pt: 2 recurrent groups ('a', 'b'); pass --select GROUP"),
        ("lower", "no node named 'x'; pass select=NODE", "no node named 'x'; pass --node NODE"),
        ("convert", "opset: expected 13 to 23, found 99", "--opset: expected 13 to 23, found 99"),
        ("convert", "opset=, batch_first=, seq_lens= and states= apply to to_format=onnx only", "--opset, --batch-first, --seq-lens-input and --no-states apply to --to onnx only"),
        ("verify", "seq_lens= and batches= vary it", "--seq-lens and --batch vary it"),
        ("build", "rebuild it here or build with version_compatible=True", "rebuild it here or build with --version-compatible"),
        # a spec's own fields and other names are left as they are
        ("convert", "pass spec=rnn_tanh,input=3,hidden=4", "pass --spec rnn_tanh,input=3,hidden=4"),
        ("convert", "layout=1 (batch-major) is not supported", "layout=1 (batch-major) is not supported"),
        ("convert", "spec lstm,input=3: missing hidden=N", "spec lstm,input=3: missing hidden=N"),
    ],
)
def test_parameters_are_shown_as_the_verbs_flags(verb: str, message: str, shown: str) -> None:
    assert flagged(message, verb) == shown


def test_a_library_refusal_names_the_parameter_and_the_cli_names_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A cuDNN blob without a recorded spec: Python users are told spec=, CLI users --spec."""
    blob = tmp_path / "blob.safetensors"
    assert main(["convert", str(_example(tmp_path)), "-o", str(blob), "--to", "cudnn", "--no-check"]) == 0
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    with safe_open(str(blob), "np") as f:
        metadata = {k: v for k, v in f.metadata().items() if k == "format"}  # the blob's marker, not its spec
    save_file(load_file(str(blob)), str(tmp_path / "bare.safetensors"), metadata=metadata)
    with pytest.raises(RNNXError, match="spec") as raised:
        rnnx.load(tmp_path / "bare.safetensors", format="cudnn")
    assert "--spec" not in str(raised.value)
    capsys.readouterr()
    assert main(["convert", str(tmp_path / "bare.safetensors"), "--from", "cudnn", "-o", str(tmp_path / "x.onnx")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--spec" in err[0], err


def _example(tmp_path: Path) -> Path:
    path = tmp_path / "w.safetensors"
    rnnx.save(RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4"), seed=0), path)
    return path


def test_the_command_loads_no_framework_until_a_verb_needs_one() -> None:
    """`rnnx --help` and a refusal stay fast, and work where torch is not installed."""
    import subprocess
    import sys

    code = "import sys, rnnx.cli; print(sorted(m for m in ('torch', 'onnx', 'onnxruntime', 'matplotlib', 'tensorrt', 'keras', 'jax') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
