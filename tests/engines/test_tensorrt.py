"""TensorRT: rnnx's own logic on any machine; building and running engines only where TensorRT is.

What runs without TensorRT: profile parsing, the metadata check, the message when TensorRT is
missing, rnnx's translation of its profiles into Polygraphy's ``Profile`` objects and of
Polygraphy's errors into one line (Polygraphy is pure Python). None of that is a test of
TensorRT. Building and running engines needs TensorRT's Python bindings and a GPU; on the CPU
machines this project is developed and tested on those tests skip, because TensorRT's
libraries cannot be installed there.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from rnnx import RNNSpec, RNNWeights, RNNXError
from rnnx.check import stack
from rnnx.engines.tensorrt import Profile, check_metadata, default_profile

HAS_TRT = importlib.util.find_spec("tensorrt") is not None
NO_TENSORRT = "TensorRT's libraries cannot be installed on these machines"


def test_profiles_parse_and_validate() -> None:
    p = Profile.parse("X:1x1x8,50x8x8,200x32x8; h0:2x1x16,2x8x16,2x32x16")
    assert p.shapes["X"] == ((1, 1, 8), (50, 8, 8), (200, 32, 8)) and set(p.shapes) == {"X", "h0"}
    with pytest.raises(RNNXError, match="min <= opt <= max"):
        Profile.parse("X:5x1x8,2x1x8,9x1x8")
    with pytest.raises(RNNXError, match="three shapes"):
        Profile.parse("X:1x1x8,2x2x8")


def test_default_profile_covers_the_stack_inputs() -> None:
    p = default_profile(RNNSpec.parse("lstm,input=8,hidden=16,layers=2,bidirectional,proj=4"))
    assert p.shapes["h0"][2] == (4, 32, 4) and p.shapes["c0"][2] == (4, 32, 16) and p.shapes["X"][0] == (1, 1, 8)


def test_metadata_mismatches_are_refused_readably() -> None:
    meta = {"tensorrt": "10.3.0", "gpu": {"compute_capability": "8.7"}}
    check_metadata(meta, "10.3.0", {"compute_capability": "8.7"})
    with pytest.raises(RNNXError, match="built with TensorRT 10.3.0, this is 8.6.2"):
        check_metadata(meta, "8.6.2", {"compute_capability": "8.7"})
    with pytest.raises(RNNXError, match="compute capability 8.7, this GPU is 9.0"):
        check_metadata(meta, "10.3.0", {"compute_capability": "9.0"})
    check_metadata({**meta, "version_compatible": True, "hardware_compatible": True}, "10.5.0", {"compute_capability": "9.0"})


@pytest.mark.skipif(HAS_TRT, reason="checks the message shown when TensorRT is missing")
def test_build_without_tensorrt_says_so_and_writes_nothing(tmp_path) -> None:
    src = tmp_path / "w.safetensors"
    import rnnx

    rnnx.save(RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4")), src)
    out = subprocess.run([sys.executable, "-m", "rnnx.cli", "build", str(src), "--from-weights", "-o", str(tmp_path / "m.engine")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "TensorRT's Python bindings are not installed" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.safetensors"]


def test_profiles_become_polygraphys_profiles() -> None:
    """rnnx's min/opt/max shapes handed to Polygraphy's own ``Profile`` class, one per profile
    (this checks rnnx's translation; TensorRT itself does not run here)."""
    pytest.importorskip("polygraphy", reason="Polygraphy is not installed")
    from polygraphy.backend.trt import Profile as PolygraphyProfile

    from rnnx.engines.tensorrt import polygraphy_profiles

    ours = [Profile.parse("X:1x1x8,50x8x8,200x32x8;h0:2x1x16,2x8x16,2x32x16"), Profile.parse("X:1x1x8,2x1x8,3x1x8")]
    theirs = polygraphy_profiles(ours)
    assert [type(p) for p in theirs] == [PolygraphyProfile, PolygraphyProfile]
    assert list(theirs[0]) == ["X", "h0"] and list(theirs[1]) == ["X"]
    assert (theirs[0]["h0"].min, theirs[0]["h0"].opt, theirs[0]["h0"].max) == ((2, 1, 16), (2, 8, 16), (2, 32, 16))
    assert tuple(theirs[1]["X"].max) == (3, 1, 8)


def test_polygraphys_errors_become_one_line_and_its_log_stays_off_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    """A real Polygraphy refusal (a runner used before activation; no TensorRT involved) reaches
    the user as one RNNXError line; Polygraphy's warnings, which it prints on stdout, go to
    stderr, so that stdout carries only rnnx's report (``--json``), and its notes are hidden."""
    pytest.importorskip("polygraphy", reason="Polygraphy is not installed")
    from polygraphy.backend.trt import CreateConfig, TrtRunner

    from rnnx.engines.tensorrt import polygraphy_errors

    with pytest.raises(RNNXError) as caught, polygraphy_errors("TensorRT could not run the engine"):
        CreateConfig(calibrator=object())  # a warning (a calibrator without int8) and a note (TF32 is off)
        TrtRunner(engine=None).infer({})
    message = str(caught.value)
    assert message.startswith("TensorRT could not run the engine: ") and "activated" in message and "\n" not in message
    out, err = capsys.readouterr()
    assert out == "" and "calibrator was provided" in err and "activated" in err and "TF32" not in err


@pytest.mark.tensorrt
@pytest.mark.skipif(not HAS_TRT, reason=NO_TENSORRT)
@pytest.mark.parametrize("text", ["lstm,input=8,hidden=16,layers=2,bidirectional", "gru,input=6,hidden=12", "lstm,input=5,hidden=8,proj=3"])
def test_engine_from_weights_matches_reference(tmp_path, text: str) -> None:
    from rnnx.engines.tensorrt import BuildOptions, TensorRTRunner, build_from_weights

    weights = RNNWeights.random(RNNSpec.parse(text), seed=4)
    meta = build_from_weights(weights, tmp_path / "m.engine", BuildOptions())
    assert meta["spec"] == str(weights.spec)
    with TensorRTRunner(tmp_path / "m.engine") as runner:
        report = stack.check("tensorrt", runner, weights, shapes=[(1, 1), (50, 8), (200, 32)])
    assert report, str(report)


@pytest.mark.tensorrt
@pytest.mark.skipif(not HAS_TRT, reason=NO_TENSORRT)
def test_an_engine_without_its_record_is_refused(tmp_path) -> None:
    from rnnx.engines.tensorrt import BuildOptions, TensorRTRunner, build_from_weights, metadata_path

    build_from_weights(RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4"), seed=1), tmp_path / "m.engine", BuildOptions())
    metadata_path(tmp_path / "m.engine").unlink()
    with pytest.raises(RNNXError, match="no m.engine.json beside it"):
        TensorRTRunner(tmp_path / "m.engine")
