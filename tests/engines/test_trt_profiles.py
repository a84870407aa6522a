"""TensorRT engines built for the model's real shapes, INT8 only where it is real, and only with a
TensorRT this code knows: all decided before TensorRT is loaded, so all tested without it.

What these tests prove: the optimization profile rnnx derives from a file (``rnnx export``'s
record, else the dimensions' names), trtexec-style overrides, the refusals (a dynamic dimension
no profile covers, implicit INT8, an unknown TensorRT major), and that the profiles reach
Polygraphy's own ``Profile`` objects and ENGINE.json. What they do not prove: that TensorRT
builds or runs the engine; the end-to-end test below uses a stand-in for TensorRT's module and
Polygraphy's build loaders, and checks only rnnx's side of that call.
"""

from __future__ import annotations

import importlib.util
import json
import tomllib
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights, RNNXError
from rnnx.cli import main
from rnnx.engines import tensorrt as trt_module
from rnnx.engines.tensorrt import (
    KNOWN_MAJORS,
    BuildOptions,
    build_engine,
    check_tensorrt_version,
    default_profile,
    plan_build,
    polygraphy_profiles,
    precision_refusal,
    quantize_nodes,
)
from rnnx.formats.onnx_build import build_stack_model
from rnnx.formats.onnx_metadata import read_metadata
from rnnx.formats.onnx_read import load_model
from rnnx.shapes.file_dims import FROM_NAME, FROM_NOTHING, FROM_RECORD, read_file_dims
from rnnx.shapes.profiles import Profile, merge_shapes, parse_shapes, plan_profiles

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
HAS_TRT = importlib.util.find_spec("tensorrt") is not None
ROOT = Path(__file__).resolve().parents[2]


class Tagger(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 16, batch_first=True)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x: Any) -> Any:
        y, _ = self.lstm(x)
        return self.head(y)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A batch-first LSTM exported by rnnx at batch 2, length 10: the record says x is (batch, seq, 8)."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("exported") / "tagger.onnx"
    rnnx.export(Tagger().eval(), (torch.randn(2, 10, 8),), path)
    return path


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same model through torch.onnx (TorchScript): no rnnx record; the producer named the dims batch and time."""
    path = tmp_path_factory.mktemp("foreign") / "tagger.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Tagger().eval(), (torch.randn(2, 10, 8),), str(path), input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch", 1: "time"}}, dynamo=False)
    return path


def _graph(path: Path, dims: dict[str, list[Any]], qdq: bool = False, in_subgraph: bool = False) -> Path:
    """A small hand-made file: each input (float) passed through Identity, optionally quantized."""
    from onnx import TensorProto, helper

    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in dims.items()]
    nodes, outputs, inits = [], [], []
    for n in dims:
        nodes.append(helper.make_node("Identity", [n], [f"{n}_out"]))
        outputs.append(helper.make_tensor_value_info(f"{n}_out", TensorProto.FLOAT, None))
    if qdq:
        inits = [helper.make_tensor("scale", TensorProto.FLOAT, [], [0.1]), helper.make_tensor("zero", TensorProto.INT8, [], [0])]
        body = [helper.make_node("QuantizeLinear", ["q_in", "scale", "zero"], ["q"]), helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["dq"])]
        first = next(iter(dims))
        if in_subgraph:  # the Q/DQ pair inside an If's branches: TensorRT sees those too
            branch = helper.make_graph([helper.make_node("Identity", [first], ["q_in"]), *body], "branch", [],
                                       [helper.make_tensor_value_info("dq", TensorProto.FLOAT, None)])
            inits.append(helper.make_tensor("cond", TensorProto.BOOL, [], [True]))
            nodes.append(helper.make_node("If", ["cond"], ["quantized"], then_branch=branch, else_branch=branch))
        else:
            nodes += [helper.make_node("Identity", [first], ["q_in"]), *body, helper.make_node("Identity", ["dq"], ["quantized"])]
        outputs.append(helper.make_tensor_value_info("quantized", TensorProto.FLOAT, None))
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, inits), opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return path


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(argv)
    return code, capsys.readouterr().err.strip().splitlines()


# --- profiles from the file ---------------------------------------------------------------


def test_an_rnnx_exported_file_gives_batch_1_to_32_and_its_example_length(exported: Path) -> None:
    proto = load_model(exported, lazy=True)
    [choice] = plan_profiles(read_file_dims(proto))
    assert choice.profile.shapes == {"x": ((1, 1, 8), (8, 10, 8), (32, 40, 8))}
    batch, seq = choice.dimensions["batch"], choice.dimensions["seq"]
    assert (batch["role"], batch["min"], batch["opt"], batch["max"]) == ("batch", 1, 8, 32)
    assert (seq["role"], seq["min"], seq["opt"], seq["max"]) == ("length", 1, 10, 40)
    assert batch["role_from"] == seq["role_from"] == FROM_RECORD and "example's length 10" in seq["from"]
    assert choice.summary() == "batch 1..32 (opt 8), seq 1..40 (opt 10)"
    # what `rnnx build` hands to the builder: the same, checked before any TensorRT is loaded
    assert [c.profile for c in plan_build(proto, BuildOptions(), str(exported))] == [choice.profile]


def test_a_file_without_record_is_read_by_its_dims_names(foreign: Path) -> None:
    proto = load_model(foreign, lazy=True)
    assert read_metadata(proto)[0] is None
    [choice] = plan_profiles(read_file_dims(proto))
    assert choice.profile.shapes == {"x": ((1, 1, 8), (8, 64, 8), (32, 256, 8))}  # no example: length 1..256, opt 64
    assert choice.dimensions["time"]["role"] == "length" and "without an example" in choice.dimensions["time"]["from"]
    assert choice.dimensions["time"]["role_from"] == choice.dimensions["batch"]["role_from"] == FROM_NAME


def test_profiles_become_polygraphys_own_profile_objects(exported: Path) -> None:
    pytest.importorskip("polygraphy", reason="Polygraphy is not installed")
    from polygraphy.backend.trt import Profile as PolygraphyProfile

    [choice] = plan_profiles(read_file_dims(load_model(exported, lazy=True)))
    [theirs] = polygraphy_profiles([choice.profile])
    assert isinstance(theirs, PolygraphyProfile) and list(theirs) == ["x"]
    assert (tuple(theirs["x"].min), tuple(theirs["x"].opt), tuple(theirs["x"].max)) == ((1, 1, 8), (8, 10, 8), (32, 40, 8))


# --- trtexec's flags ----------------------------------------------------------------------


def test_trtexec_shapes_parse() -> None:
    assert parse_shapes("x:1x16x80,h0:1x1x32", "--min-shapes") == {"x": (1, 16, 80), "h0": (1, 1, 32)}
    assert parse_shapes("'input:0':1x3,'a,b':2", "--opt-shapes") == {"input:0": (1, 3), "a,b": (2,)}
    assert merge_shapes([{"x": (1,)}, {"h0": (2,)}], "--max-shapes") == {"x": (1,), "h0": (2,)}
    for bad in ("x", "x:", "x:1xA", ":1x2", "x:1x2,", "'x:1x2", "x:1x-2", "x:1x2,x:1x2"):
        with pytest.raises(RNNXError, match="^--min-shapes "):
            parse_shapes(bad, "--min-shapes")
    with pytest.raises(RNNXError, match="'x' is given twice"):
        merge_shapes([{"x": (1,)}, {"x": (2,)}], "--max-shapes")


@pytest.mark.parametrize(("flag", "value"), [("--min-shapes", "x:1xAx8"), ("--opt-shapes", "x=1x2"), ("--max-shapes", "x:1x2,,h:3")])
def test_bad_trtexec_shapes_are_one_usage_line_naming_the_flag(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["build", "m.onnx", "-o", "m.engine", flag, value])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and f"argument {flag}: " in err[0] and "NAME:AxBxC" in err[0], err


def test_overrides_replace_their_ends_and_carry_to_inputs_sharing_a_dimension() -> None:
    weights = RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4,layers=2"), seed=0)
    stack = build_stack_model(weights)  # X (seq, batch, 3), h0 and c0 (2, batch, 4)
    options = BuildOptions(max_shapes={"X": (400, 64, 3)}, opt_shapes={"X": (100, 16, 3)})
    [choice] = plan_build(stack, options, "stack", default_profile(weights.spec))
    assert choice.profile.shapes["X"] == ((1, 1, 3), (100, 16, 3), (400, 64, 3))
    assert choice.profile.shapes["h0"] == choice.profile.shapes["c0"] == ((2, 1, 4), (2, 16, 4), (2, 64, 4))
    assert "given (max_shapes, --max-shapes)" in choice.dimensions["batch"]["from"]
    # a partial --profile: the inputs it leaves out take the sizes it gives their dimensions
    [choice] = plan_build(stack, BuildOptions(profiles=[Profile.parse("X:1x2x3,5x4x3,9x6x3")]), "stack")
    assert choice.profile.shapes["c0"] == ((2, 2, 4), (2, 4, 4), (2, 6, 4))


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--max-shapes", "x:20x5x8"], "input 'x' dimension 1 ('seq'): min 1, opt 10, max 5"),
        (["--min-shapes", "y:1x2x8"], "--min-shapes y:1x2x8: the file has no input 'y'; its inputs are x"),
        (["--opt-shapes", "x:1x2x9"], "--opt-shapes x:1x2x9: dimension 2 of 'x' is fixed at 8 in the file, not 9"),
        (["--opt-shapes", "x:1x2"], "'x' has 3 dimensions"),
        (["--profile", "x:1x1x8,2x2x8,3x3x8", "--max-shapes", "x:4x4x8"], "--profile and --min-shapes, --opt-shapes or --max-shapes were both given"),
    ],
)
def test_shapes_that_do_not_fit_the_file_are_refused_in_one_line(exported: Path, tmp_path: Path, argv: list[str], fragment: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(["build", str(exported), "-o", str(tmp_path / "m.engine"), *argv], capsys)
    assert code == 2 and len(err) == 1 and fragment in err[0], err
    assert not list(tmp_path.iterdir())


# --- refusals before any build ------------------------------------------------------------


def test_a_dynamic_dimension_no_profile_covers_is_refused_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _graph(tmp_path / "g.onnx", {"x": ["batch", "seq", "feat"]})
    code, err = _cli(["build", str(path), "-o", str(tmp_path / "g.engine")], capsys)
    assert code == 2 and len(err) == 1, err
    assert "input 'x' dimension 2 ('feat') is dynamic and no profile covers it" in err[0]
    assert f"neither a batch nor a length ({FROM_NOTHING})" in err[0]
    assert "--min-shapes, --opt-shapes and --max-shapes (x:?x?x? with ? filled in) or --profile" in err[0]
    assert not (tmp_path / "g.engine").exists()
    # given, it is covered; the batch and the length keep their defaults
    [choice] = plan_build(load_model(path), BuildOptions(min_shapes={"x": (1, 1, 80)}, opt_shapes={"x": (8, 64, 80)}, max_shapes={"x": (32, 256, 80)}),
                          str(path))
    assert choice.profile.shapes["x"] == ((1, 1, 80), (8, 64, 80), (32, 256, 80)) and choice.dimensions["feat"]["min"] == 80
    # only one end given: the others are still unknown, and named
    with pytest.raises(RNNXError, match=r"'feat'.*no min and max can be chosen"):
        plan_build(load_model(path), BuildOptions(opt_shapes={"x": (8, 64, 80)}), str(path))


def _length_bound_file(path: Path, kernel: int = 5, pool: int = 0, table: int = 0) -> Path:
    """x (batch, 3, seq) through a Conv of ``kernel`` frames (no padding), a MaxPool of ``pool``
    frames, and positions looked up in a table of ``table`` rows: seq must be at least what the
    kernel and the pool need, and at most the table's rows."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((3, 3, kernel)).astype(np.float32), "w")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["y0"])]
    last = "y0"
    if pool:
        nodes.append(helper.make_node("MaxPool", [last], ["y1"], kernel_shape=[pool], strides=[pool]))
        last = "y1"
    if table:  # y + table[0:seq'] along time: Shape -> Gather(2) -> Range -> Gather(table)
        inits += [numpy_helper.from_array(rng.standard_normal((table, 1)).astype(np.float32), "table"),
                  numpy_helper.from_array(np.array(2, np.int64), "two"), numpy_helper.from_array(np.array(0, np.int64), "zero"),
                  numpy_helper.from_array(np.array(1, np.int64), "one"), numpy_helper.from_array(np.array([1, 1, -1], np.int64), "row")]
        nodes += [helper.make_node("Shape", [last], ["shape"]), helper.make_node("Gather", ["shape", "two"], ["steps"]),
                  helper.make_node("Range", ["zero", "steps", "one"], ["at"]), helper.make_node("Gather", ["table", "at"], ["rows"]),
                  helper.make_node("Reshape", ["rows", "row"], ["pos"]), helper.make_node("Add", [last, "pos"], ["y2"])]
        last = "y2"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "seq"])],
                              [helper.make_tensor_value_info(last, TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_length_the_file_cannot_run_at_is_not_in_the_profile(tmp_path: Path) -> None:
    """A Conv of 5 frames refuses lengths 1 to 4: the profile's min is the least length the file
    runs at (5, found by asking, not a power of two), with why; a table of 100 positions
    refuses more than 100 frames: the max is 100 (the default would be 256)."""
    path = _length_bound_file(tmp_path / "conv.onnx", kernel=5, table=100 - 4)  # the Conv's output is 4 frames shorter
    [choice] = plan_build(load_model(path), BuildOptions(), str(path))
    assert choice.profile.shapes["x"] == ((1, 3, 5), (8, 3, 64), (32, 3, 100))
    said = choice.dimensions["seq"]["from"]
    assert said.startswith("min from the least length the file runs at, 5 (asked of ONNX Runtime and ONNX's reference; at 1: "), said
    assert "max from the greatest length the file runs at, 100 (" in said, said
    # a min given is the caller's: not asked about
    [given] = plan_build(load_model(path), BuildOptions(min_shapes={"x": (1, 3, 7)}), str(path))
    assert given.profile.shapes["x"][0] == (1, 3, 7)


def test_a_pool_onnx_runtime_is_lenient_with_is_held_to_its_definition(tmp_path: Path) -> None:
    """ONNX Runtime's MaxPool gives a frame from fewer frames than its kernel; the operator's
    definition (ONNX's reference, and torch) gives none: the min is where both run."""
    path = _length_bound_file(tmp_path / "pool.onnx", kernel=3, pool=4)  # needs 3 - 1 + 4 = 6 frames
    [choice] = plan_build(load_model(path), BuildOptions(), str(path))
    assert choice.profile.shapes["x"][0] == (1, 3, 6), choice.dimensions["seq"]


def _multiple_of_3_and_a_second_input(path: Path) -> Path:
    """x (batch, 3, seq) reshaped into groups of 3 frames (seq must be a multiple of 3), and v
    (batch, 3, vseq) through a Conv of 5 frames: each length has its own bound."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array([0, 9, -1], np.int64), "groups"),
             numpy_helper.from_array(np.random.default_rng(0).standard_normal((3, 3, 5)).astype(np.float32), "w")]
    nodes = [helper.make_node("Reshape", ["x", "groups"], ["xg"]), helper.make_node("Conv", ["v", "w"], ["vc"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "seq"]),
                                           helper.make_tensor_value_info("v", TensorProto.FLOAT, ["batch", 3, "vseq"])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("xg", "vc")], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_each_length_is_asked_alone_and_the_first_lengths_one_by_one(tmp_path: Path) -> None:
    """seq runs at multiples of 3 only: its least is 3 (asked one by one), not where a doubling
    search lands; vseq's Conv bound (5) is its own and not seq's; a given opt the model does not
    run at is refused by name."""
    path = _multiple_of_3_and_a_second_input(tmp_path / "two.onnx")
    ends = {"opt_shapes": {"x": (8, 3, 63), "v": (8, 3, 64)}, "max_shapes": {"x": (32, 3, 255), "v": (32, 3, 256)}}
    [choice] = plan_build(load_model(path), BuildOptions(**ends), str(path))  # type: ignore[arg-type]
    assert (choice.dimensions["seq"]["min"], choice.dimensions["vseq"]["min"]) == (3, 5), choice.dimensions
    with pytest.raises(RNNXError, match=r"expected the model to run at the profile's opt \(seq 62, vseq 64\), found it does not .*opt_shapes="):
        plan_build(load_model(path), BuildOptions(opt_shapes={"x": (8, 3, 62), "v": (8, 3, 64)}), str(path))


def test_a_file_without_dynamic_dimensions_needs_no_profile(tmp_path: Path) -> None:
    path = _graph(tmp_path / "s.onnx", {"x": [2, 10, 8]})
    assert plan_build(load_model(path), BuildOptions(), str(path)) == []


def test_implicit_int8_is_refused_and_explicit_int8_is_not(exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(["build", str(exported), "-o", str(tmp_path / "m.engine"), "--precision", "int8"], capsys)
    assert code == 2 and len(err) == 1, err
    assert "--precision int8 refused" in err[0] and "no QuantizeLinear/DequantizeLinear nodes" in err[0] and "implicit INT8" in err[0]
    assert not list(tmp_path.iterdir())
    quantized = _graph(tmp_path / "q.onnx", {"x": [2, 8]}, qdq=True)
    nested = _graph(tmp_path / "n.onnx", {"x": [2, 8]}, qdq=True, in_subgraph=True)
    assert quantize_nodes(load_model(quantized)) == 2 and quantize_nodes(load_model(nested)) == 4
    assert precision_refusal("int8", load_model(quantized), "q.onnx") is None
    assert precision_refusal("int8", load_model(nested), "n.onnx") is None
    # a quantized file runs its Q/DQ layers in INT8 whatever is asked: recording fp16 would be false
    assert "is explicitly quantized (2 QuantizeLinear/DequantizeLinear nodes)" in str(precision_refusal("fp16", load_model(quantized), "q.onnx"))
    assert precision_refusal("fp32", load_model(exported), "m.onnx") is None


def test_int8_from_weights_is_refused_before_anything_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "w.safetensors"
    rnnx.save(RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4"), seed=0), src)
    code, err = _cli(["build", str(src), "--from-weights", "-o", str(tmp_path / "m.engine"), "--precision", "int8"], capsys)
    assert code == 2 and len(err) == 1 and "the lowered stack rnnx builds from weights has no QuantizeLinear" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.safetensors"]


@pytest.mark.skipif(HAS_TRT, reason="checks where a build stops when TensorRT is missing")
def test_a_covered_file_gets_past_every_check_to_tensorrt(exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(["build", str(exported), "-o", str(tmp_path / "m.engine"), "--max-shapes", "x:64x200x8"], capsys)
    assert code == 2 and len(err) == 1 and "TensorRT's Python bindings are not installed" in err[0], err


# --- TensorRT's version -------------------------------------------------------------------


def test_the_version_check_knows_8_to_10_and_refuses_other_majors_by_name() -> None:
    assert [check_tensorrt_version(v) for v in ("8.6.1", "9.2.0.post12.dev5", "10.3.0", "10.13.3.9")] == [8, 9, 10, 10]
    with pytest.raises(RNNXError, match=r"TensorRT 11\.0\.0 is a major version rnnx does not know.*removed the FP16, INT8 and BF16 builder flags"):
        check_tensorrt_version("11.0.0")
    with pytest.raises(RNNXError, match=r"TensorRT 7\.2\.3 is older"):
        check_tensorrt_version("7.2.3")
    for unreadable in ("", "unknown", "ten"):
        with pytest.raises(RNNXError, match="cannot read"):
            check_tensorrt_version(unreadable)


def test_the_gpu_extra_pins_the_majors_the_code_knows() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    [pin] = [r for r in extras["gpu"] if r.startswith("tensorrt")]
    assert pin == f"tensorrt>=8.6,<{KNOWN_MAJORS[-1] + 1}"


# --- rnnx's side of the build call, with a stand-in for TensorRT --------------------------


class _FakeLoaders:
    """Polygraphy's build loaders as far as rnnx calls them: the real ``CreateConfig`` (pure
    Python until called), a network and an engine that are placeholders, and a ``SaveEngine``
    that writes a placeholder file. Nothing of TensorRT runs."""

    def __init__(self) -> None:
        from polygraphy.backend import trt as real

        self.CreateConfig, self.PostprocessConfig = real.CreateConfig, real.PostprocessConfig
        self.configs: list[Any] = []

    def NetworkFromOnnxPath(self, path: str) -> Any:  # noqa: N802  Polygraphy's name
        return lambda: "network"

    def EngineFromNetwork(self, network: Any, config: Any, save_timing_cache: Any = None) -> Any:  # noqa: N802
        self.configs.append(config)
        return "engine"

    def SaveEngine(self, engine: Any, path: str) -> Any:  # noqa: N802
        return lambda: Path(path).write_bytes(b"placeholder")


def _fake_trt(version: str) -> Any:
    flags = SimpleNamespace(TF32=1, FP16=2, BF16=3, INT8=4, VERSION_COMPATIBLE=5, GPU_FALLBACK=6)
    return SimpleNamespace(__version__=version, BuilderFlag=flags, IBuilderConfig=SimpleNamespace(builder_optimization_level=None))


def test_engine_json_records_the_profiles_handed_to_polygraphy(exported: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("polygraphy", reason="Polygraphy is not installed")
    from polygraphy.backend.trt import Profile as PolygraphyProfile

    loaders = _FakeLoaders()
    monkeypatch.setattr(trt_module, "_import_trt", lambda: _fake_trt("10.3.0"))
    monkeypatch.setattr(trt_module, "_import_polygraphy", lambda: loaders)
    meta = build_engine(exported, tmp_path / "m.engine", BuildOptions(max_shapes={"x": (64, 200, 8)}))
    written = json.loads((tmp_path / "m.engine.json").read_text())
    assert written["profiles"] == meta["profiles"] == [{"x": [[1, 1, 8], [8, 10, 8], [64, 200, 8]]}]
    assert written["profile_dimensions"][0]["seq"]["max"] == 200 and written["precision"] == "fp32" and "quantization" not in written
    [config] = loaders.configs
    [handed] = config._config.profiles  # PostprocessConfig around CreateConfig
    assert isinstance(handed, PolygraphyProfile) and (tuple(handed["x"].min), tuple(handed["x"].max)) == ((1, 1, 8), (64, 200, 8))
    # an unknown TensorRT major is refused by name before anything is built or written
    monkeypatch.setattr(trt_module, "_import_trt", lambda: _fake_trt("11.1.0"))
    with pytest.raises(RNNXError, match="TensorRT 11.1.0 is a major version rnnx does not know"):
        build_engine(exported, tmp_path / "n.engine", BuildOptions())
    assert not (tmp_path / "n.engine").exists() and not (tmp_path / "n.engine.json").exists()
