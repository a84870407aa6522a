"""TensorRT: build an engine from ONNX and run it, through Polygraphy's loaders.

Thin on purpose. NVIDIA's Polygraphy does the work: ``NetworkFromOnnxPath`` (TensorRT's ONNX
parser), ``CreateConfig`` (precision, profiles, workspace, timing cache, compatibility),
``EngineFromNetwork`` and ``SaveEngine`` to build and write, ``EngineFromBytes`` and
``TrtRunner`` to load and run (TensorRT 8.6 and later; on Jetson the JetPack one). rnnx adds
what Polygraphy does not know: options this TensorRT lacks are refused by name before a
build instead of ignored; next to each engine a small JSON file records what it was built
for (TensorRT, GPU, precision, profiles, the source and, for an rnnx stack, its spec), and
loading checks it and refuses a mismatch with a message rather than a crash in
deserialization; a stack's states not fed start at zeros (:mod:`rnnx.engines.runner`).

Before anything is built, and without TensorRT: the optimization profile comes from the file
(:mod:`rnnx.shapes.profiles`), a dynamic dimension no profile covers is refused by name;
``int8`` is built only from a file with QuantizeLinear/DequantizeLinear nodes (explicit
quantization), never by the builder flag alone (implicit INT8, deprecated in TensorRT 10.1 and
removed in 11); a TensorRT of a major version this code was not written against (it is written
against 8.6 to 10.x; 11 removed the precision builder flags it sets) is refused by name.

On the CPU machines the tests run on TensorRT's libraries cannot be installed, so nothing
here that needs them runs there (see docs/engines.md).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from rnnx.engines.runner import with_zero_states
from rnnx.engines.shape_probe import shape_probe
from rnnx.engines.tensorrt_version import TensorRTVersion
from rnnx.errors import RNNXError
from rnnx.fileio import atomic_output, file_sha256, require_file
from rnnx.formats.onnx_build import build_stack_model, save_model
from rnnx.formats.onnx_read import load_model as load_onnx
from rnnx.graphs.lower import lower_recurrences
from rnnx.shapes.file_dims import read_file_dims
from rnnx.shapes.profiles import Profile, ProfileChoice, Shape, plan_profiles
from rnnx.spec import RNNSpec

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "int8")
#: The TensorRT major versions this code is written against: 8 (8.6 and later for every option),
#: 9 and 10. TensorRT 11 removed BuilderFlag.FP16, INT8 and BF16 (precision comes from a strongly
#: typed network's own types), which this code sets.
KNOWN_MAJORS = (8, 9, 10)
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


@dataclass
class BuildOptions:
    """What to build. ``profiles``: whole optimization profiles (``--profile``); else one profile
    decided from the file (:func:`rnnx.shapes.profiles.plan_profiles`), whose ends
    ``min_shapes``/``opt_shapes``/``max_shapes`` override per input (trtexec's flags)."""

    precision: str = "fp32"
    profiles: list[Profile] = field(default_factory=list)
    min_shapes: dict[str, Shape] = field(default_factory=dict)
    opt_shapes: dict[str, Shape] = field(default_factory=dict)
    max_shapes: dict[str, Shape] = field(default_factory=dict)
    workspace_bytes: int | None = None
    timing_cache: Path | None = None
    optimization_level: int | None = None
    dla_core: int | None = None
    hardware_compatible: bool = False
    version_compatible: bool = False


def _import_trt() -> Any:
    try:
        import tensorrt as trt
    except ImportError:
        raise RNNXError(
            "TensorRT's Python bindings are not installed: on x86 pip install 'rnnx[gpu]' (needs NVIDIA's package host); "
            "on Jetson use JetPack's python3-libnvinfer"
        ) from None
    return trt


def check_tensorrt_version(version: str) -> int:
    """The major version of TensorRT ``version`` (``tensorrt.__version__``), or a refusal naming
    it where this code was not written against that major (:data:`KNOWN_MAJORS`)."""
    found = TensorRTVersion.reported(version)
    if found is None:
        raise RNNXError(f"TensorRT reports its version as {version!r}, which rnnx cannot read; rnnx builds with TensorRT 8.6 to 10.x")
    major = found.major
    if major in KNOWN_MAJORS:
        return major
    if major > KNOWN_MAJORS[-1]:
        raise RNNXError(f"TensorRT {version} is a major version rnnx does not know: rnnx builds with TensorRT 8.6 to 10.x "
                        f"(TensorRT 11 removed the FP16, INT8 and BF16 builder flags it sets, in favour of strongly typed networks); "
                        f"install tensorrt<11 (pip install 'rnnx[gpu]' pins it)")
    raise RNNXError(f"TensorRT {version} is older than rnnx supports: rnnx builds with TensorRT 8.6 to 10.x")


def quantize_nodes(proto: Any) -> int:
    """How many QuantizeLinear/DequantizeLinear nodes (ONNX's own domain) the model holds, in
    its graph, its subgraphs and its local functions: explicit quantization, as TensorRT builds INT8."""
    found = 0
    graphs = [proto.graph] + [f for f in getattr(proto, "functions", [])]
    while graphs:
        graph = graphs.pop()
        for node in graph.node:
            if node.op_type in QDQ_OPS and node.domain in ("", "ai.onnx"):
                found += 1
            for attr in node.attribute:
                graphs.extend([attr.g] if attr.HasField("g") else [])
                graphs.extend(attr.graphs)
    return found


def precision_refusal(precision: str, proto: Any, what: str) -> str | None:
    """Why ``precision`` cannot honestly be built from ``proto`` (``what`` names it), or None.

    INT8 only from explicit quantization (Q/DQ nodes): the builder flag alone is implicit INT8,
    which needs a calibrator rnnx does not have (without one TensorRT has no scales) and which
    TensorRT deprecated in 10.1 and removed in 11. A file with Q/DQ nodes is built as int8
    only: its Q/DQ nodes decide where TensorRT computes in INT8 (8.6 to 10 need the INT8 flag
    for them), so any other precision would be recorded falsely."""
    if precision not in PRECISIONS:
        return f"precision: expected one of {', '.join(PRECISIONS)}, found {precision!r}"
    qdq = quantize_nodes(proto)
    if precision == "int8" and not qdq:
        return (f"precision=int8 refused: {what} has no QuantizeLinear/DequantizeLinear nodes, and rnnx builds INT8 only from an "
                "explicitly quantized file; the INT8 flag alone is implicit INT8, which needs a calibrator (TensorRT would have no "
                "scales) and was deprecated in TensorRT 10.1 and removed in 11; quantize the model with Q/DQ nodes first (e.g. "
                "NVIDIA's TensorRT Model Optimizer) or build at fp16 or fp32")
    if precision != "int8" and qdq:
        return (f"precision={precision} refused: {what} is explicitly quantized ({qdq} QuantizeLinear/DequantizeLinear nodes), "
                "so its Q/DQ nodes, not a precision flag, decide where TensorRT computes in INT8 (and TensorRT 8.6 to 10 need the INT8 "
                "flag for them); build it with precision=int8")
    return None


def _import_polygraphy() -> Any:
    """TensorRT first (its message says how to get it), then Polygraphy's TensorRT loaders."""
    _import_trt()
    try:
        from polygraphy.backend import trt as loaders
    except ImportError:
        raise RNNXError("Polygraphy is not installed: pip install 'rnnx[gpu]' (or pip install polygraphy)") from None
    return loaders


@contextlib.contextmanager
def polygraphy_errors(what: str) -> Iterator[None]:
    """Polygraphy's log on stderr at warning level and up (stdout carries rnnx's reports), and
    its user errors (``PolygraphyException``) as one line saying ``what`` failed."""
    from polygraphy.exception import PolygraphyException
    from polygraphy.logger import G_LOGGER

    with G_LOGGER.verbosity(G_LOGGER.WARNING), contextlib.redirect_stdout(sys.stderr):
        try:
            yield
        except PolygraphyException as exc:
            first = (str(exc).strip().splitlines() or ["no message"])[0]
            raise RNNXError(f"{what}: {first[:300]}; TensorRT's log is above") from None


def _gpu() -> dict[str, str]:
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(0)
            return {"name": torch.cuda.get_device_name(0), "compute_capability": f"{major}.{minor}"}
    except ImportError:
        pass
    return {"name": "unknown", "compute_capability": "unknown"}


def refusals(trt: Any, options: BuildOptions) -> list[str]:
    """What ``options`` asks of this TensorRT that it lacks, each naming the missing API."""
    if options.precision not in PRECISIONS:
        raise RNNXError(f"precision: expected one of {', '.join(PRECISIONS)}, found {options.precision!r}")
    refused = []
    flags = [options.precision.upper()] if options.precision != "fp32" else []
    flags += ["VERSION_COMPATIBLE"] if options.version_compatible else []
    flags += ["GPU_FALLBACK"] if options.dla_core is not None else []
    for name in flags:
        if not hasattr(trt.BuilderFlag, name):
            refused.append(f"{name.lower()} (TensorRT {trt.__version__} has no BuilderFlag.{name})")
    if options.optimization_level is not None and not hasattr(trt.IBuilderConfig, "builder_optimization_level"):
        refused.append("builder optimization level (needs TensorRT 8.6)")
    if options.hardware_compatible and not hasattr(trt, "HardwareCompatibilityLevel"):
        refused.append("hardware-compatible engines (need TensorRT 8.6)")
    return refused


def create_config(trt: Any, loaders: Any, options: BuildOptions) -> Any:
    """Polygraphy's ``CreateConfig`` for ``options``, after refusing what this TensorRT lacks.

    fp32 means fp32: TF32 is off unless asked for by name (Polygraphy's default too).
    Polygraphy puts DLA work on core 0; a device check after it sets the core asked for and
    refuses, by name, a core or INT8 this device lacks.
    """
    refused = refusals(trt, options)
    if refused:
        raise RNNXError("TensorRT cannot honour: " + "; ".join(refused) + "; drop those options")
    config = loaders.CreateConfig(
        tf32=options.precision == "tf32",
        fp16=options.precision == "fp16",
        bf16=options.precision == "bf16",
        int8=options.precision == "int8",
        profiles=polygraphy_profiles(options.profiles) or None,
        memory_pool_limits={trt.MemoryPoolType.WORKSPACE: options.workspace_bytes} if options.workspace_bytes else None,
        load_timing_cache=str(options.timing_cache) if options.timing_cache is not None else None,
        builder_optimization_level=options.optimization_level,
        hardware_compatibility_level=trt.HardwareCompatibilityLevel.AMPERE_PLUS if options.hardware_compatible else None,
        version_compatible=options.version_compatible or None,
        use_dla=options.dla_core is not None,
        allow_gpu_fallback=options.dla_core is not None,
    )

    def device_checks(builder: Any, network: Any, built: Any) -> None:
        if options.precision == "int8" and not getattr(builder, "platform_has_fast_int8", True):
            raise RNNXError("TensorRT cannot honour: int8 (this GPU has no fast INT8); drop that option")
        if options.dla_core is not None:
            if builder.num_DLA_cores <= options.dla_core:
                raise RNNXError(f"TensorRT cannot honour: DLA core {options.dla_core} (this device has {builder.num_DLA_cores}); drop that option")
            built.DLA_core = options.dla_core

    return loaders.PostprocessConfig(config, device_checks)


def _stack_record(onnx_path: Path) -> dict[str, str]:
    """The spec and batch-major flag rnnx wrote into an ONNX stack ({} for any other model)."""
    import onnx

    props = {p.key: p.value for p in onnx.load(str(onnx_path), load_external_data=False).metadata_props}
    if "rnnx.spec" not in props:
        return {}
    return {"spec": props["rnnx.spec"], "batch_first": props.get("rnnx.batch_first", "0")}


def plan_build(proto: Any, options: BuildOptions, what: str, default: Profile | None = None,
               data_folder: Path | None = None) -> list[ProfileChoice]:
    """What needs no TensorRT, checked before any is loaded: the precision is one the file can
    honestly be built at (:func:`precision_refusal`), and the profiles, from ``options`` or the
    file (``default``: a profile to start from instead), cover every dynamic dimension, each
    length's min one the file runs at in ONNX Runtime (``data_folder``: where its external
    data lies)."""
    refused = precision_refusal(options.precision, proto, what)
    if refused:
        raise RNNXError(refused)
    dims = read_file_dims(proto, feeding=False)
    return plan_profiles(dims, options.profiles, options.min_shapes, options.opt_shapes, options.max_shapes, base=default,
                         probe=shape_probe(proto, dims.specs, data_folder))


def build_engine(onnx_path: Path, engine_path: Path, options: BuildOptions, default: Profile | None = None) -> dict[str, Any]:
    """Check, then parse, configure, build and serialize with Polygraphy; write the engine and
    its metadata atomically. ``default``: the profile to start from instead of the file's own
    (see :func:`plan_build`)."""
    onnx_path = require_file(Path(onnx_path))
    proto = load_onnx(onnx_path, lazy=True)
    choices = plan_build(proto, options, str(onnx_path), default, data_folder=onnx_path.parent)
    qdq = quantize_nodes(proto)
    del proto
    trt = _import_trt()
    check_tensorrt_version(trt.__version__)
    loaders = _import_polygraphy()
    with polygraphy_errors("TensorRT cannot be configured as asked"):
        config = create_config(trt, loaders, replace(options, profiles=[c.profile for c in choices]))
    with polygraphy_errors(f"{onnx_path}: TensorRT's ONNX parser refused the model (`rnnx inspect` lists what onnx-tensorrt's importer source predicts, node by node)"):
        network = loaders.NetworkFromOnnxPath(str(onnx_path))()
    meta = {
        "tensorrt": trt.__version__,
        "gpu": _gpu(),
        "precision": options.precision,
        **({"quantization": f"explicit: {qdq} QuantizeLinear/DequantizeLinear nodes"} if options.precision == "int8" else {}),
        "profiles": [c.profile.as_json() for c in choices],
        "profile_dimensions": [c.dimensions for c in choices],
        "hardware_compatible": options.hardware_compatible,
        "version_compatible": options.version_compatible,
        "dla_core": options.dla_core,
        "source": {"path": str(onnx_path), "sha256": file_sha256(onnx_path)},
        **_stack_record(onnx_path),
    }
    cache = str(options.timing_cache) if options.timing_cache is not None else None
    with atomic_output(Path(engine_path)) as tmp, polygraphy_errors(f"TensorRT failed to build an engine from {onnx_path}"):
        loaders.SaveEngine(loaders.EngineFromNetwork(network, config, save_timing_cache=cache), path=str(tmp))()
    with atomic_output(metadata_path(engine_path)) as tmp:
        tmp.write_text(json.dumps(meta, indent=2))
    return meta


def default_profile(spec: Any) -> Profile:
    """For --from-weights: sequences of 1..200 steps (opt 50), batches of 1..32 (opt 8)."""
    n, out = spec.num_layers * spec.num_directions, spec.output_size
    shapes: dict[str, tuple[Shape, Shape, Shape]] = {
        "X": ((1, 1, spec.input_size), (50, 8, spec.input_size), (200, 32, spec.input_size)), "h0": ((n, 1, out), (n, 8, out), (n, 32, out))}
    if spec.cell == "lstm":
        shapes["c0"] = ((n, 1, spec.hidden_size), (n, 8, spec.hidden_size), (n, 32, spec.hidden_size))
    return Profile(shapes)


def build_from_weights(weights: Any, engine_path: Path, options: BuildOptions) -> dict[str, Any]:
    """Canonical weights -> the lowered ONNX stack (written beside the engine) -> engine, from
    :func:`default_profile` unless ``options`` give shapes."""
    model = build_stack_model(weights)
    lower_recurrences(model)
    default = default_profile(weights.spec)
    plan_build(model, options, "the lowered stack rnnx builds from weights", default)  # refuse before writing anything
    check_tensorrt_version(_import_trt().__version__)
    _import_polygraphy()
    onnx_path = Path(str(engine_path) + ".onnx")
    save_model(model, onnx_path)
    return build_engine(onnx_path, engine_path, options, default)


def metadata_path(engine_path: Path) -> Path:
    return Path(str(engine_path) + ".json")


def check_metadata(meta: dict[str, Any], trt_version: str, gpu: dict[str, str]) -> None:
    """Refuse an engine built for another TensorRT or GPU, as TensorRT itself would, but readably."""
    if meta.get("tensorrt") != trt_version and not meta.get("version_compatible"):
        raise RNNXError(f"engine built with TensorRT {meta.get('tensorrt')}, this is {trt_version}; rebuild it here or build with version_compatible=True")
    built_cc, here_cc = meta.get("gpu", {}).get("compute_capability"), gpu.get("compute_capability")
    if built_cc != here_cc and not meta.get("hardware_compatible") and "unknown" not in (built_cc, here_cc):
        raise RNNXError(f"engine built for compute capability {built_cc}, this GPU is {here_cc}; rebuild it here or build with hardware_compatible=True")


class TensorRTRunner:
    """Runs a serialized engine with Polygraphy's ``TrtRunner``: named numpy inputs in, named
    numpy outputs out. Activated on construction; ``close()`` (or ``with``) releases it."""

    device = "cuda"

    def __init__(self, engine_path: Path) -> None:
        trt = _import_trt()
        loaders = _import_polygraphy()
        from polygraphy.backend.common import BytesFromPath

        engine_path = require_file(Path(engine_path))
        meta_file = metadata_path(engine_path)
        if not meta_file.exists():
            raise RNNXError(f"{engine_path}: no {meta_file.name} beside it; rnnx loads only engines whose build it can check")
        self.meta = json.loads(meta_file.read_text())
        check_metadata(self.meta, trt.__version__, _gpu())
        self.precision = self.meta.get("precision", "fp32")
        self.spec = RNNSpec.parse(self.meta["spec"]) if self.meta.get("spec") else None
        self.batch_first = self.meta.get("batch_first") == "1"
        with polygraphy_errors(f"{engine_path}: TensorRT could not load the engine"):
            self.engine = loaders.EngineFromBytes(BytesFromPath(str(engine_path)))()
            self.runner = loaders.TrtRunner(self.engine)
            self.runner.activate()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.input_names = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.output_names = [n for n in names if n not in self.input_names]
        self.trt = trt

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.spec is not None and "X" in inputs:
            inputs = with_zero_states(self.spec, inputs, self.batch_first)
        missing = [n for n in self.input_names if n not in inputs]
        if missing:
            raise RNNXError(f"engine inputs: expected {self.input_names}, missing {missing}")
        if "seq_lens" in inputs and "seq_lens" not in self.input_names:
            raise RNNXError(f"the engine takes {self.input_names} and no seq_lens; run whole sequences or build from a model with sequence_lens")
        feed = {n: np.ascontiguousarray(inputs[n], dtype=self.trt.nptype(self.engine.get_tensor_dtype(n))) for n in self.input_names}
        with polygraphy_errors("TensorRT could not run the engine"):
            outputs = self.runner.infer(feed)
        return {n: np.array(outputs[n], copy=True) for n in self.output_names}  # TrtRunner reuses its output buffers

    def close(self) -> None:
        if getattr(self, "runner", None) is not None and self.runner.is_active:
            self.runner.deactivate()

    def __enter__(self) -> TensorRTRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def polygraphy_profiles(profiles: list[Profile]) -> list[Any]:
    """rnnx's min/opt/max shapes as Polygraphy's ``Profile`` objects (pure Python: no TensorRT needed)."""
    from polygraphy.backend.trt import Profile as PolygraphyProfile

    converted = []
    for profile in profiles:
        p = PolygraphyProfile()
        for name, (lo, opt, hi) in profile.shapes.items():
            p.add(name, min=lo, opt=opt, max=hi)
        converted.append(p)
    return converted
