"""TensorRT: build an engine from ONNX through TensorRT's ONNX parser, and run it.

Thin on purpose: parse, configure, build, serialize, run, with the plain TensorRT API
(8.6 and later; on Jetson the JetPack one). Options a given TensorRT lacks are refused by
name instead of ignored. Next to each engine a small JSON file records what it was built
for; loading checks it and refuses a mismatch with a message rather than a crash in
deserialization. Nothing here is exercised on the CPU machines the tests run on: TensorRT's
libraries cannot be installed there (see the README).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnx.errors import RNNXError
from rnnx.fileio import atomic_output, require_file

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "int8")


@dataclass
class Profile:
    """min/opt/max shapes per input name, e.g. {"X": ((1, 1, 8), (50, 8, 8), (200, 32, 8))}."""

    shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]

    @classmethod
    def parse(cls, text: str) -> Profile:
        """``X:1x1x8,50x8x8,200x32x8;h0:...`` (min, opt, max per input)."""
        shapes = {}
        for part in filter(None, (p.strip() for p in text.split(";"))):
            name, _, dims = part.partition(":")
            try:
                triple = tuple(tuple(int(d) for d in s.split("x")) for s in dims.split(","))
            except ValueError:
                raise RNNXError(f"--profile {part!r}: expected NAME:MIN,OPT,MAX with shapes like 1x1x8") from None
            if len(triple) != 3 or len({len(s) for s in triple}) != 1:
                raise RNNXError(f"--profile {part!r}: expected three shapes of one rank (min, opt, max), found {len(triple)}")
            lo, opt, hi = triple
            if any(not (a <= b <= c) for a, b, c in zip(lo, opt, hi)):
                raise RNNXError(f"--profile {part!r}: expected min <= opt <= max in every dimension")
            shapes[name.strip()] = (lo, opt, hi)
        if not shapes:
            raise RNNXError("--profile: expected at least one NAME:MIN,OPT,MAX")
        return cls(shapes)


@dataclass
class BuildOptions:
    precision: str = "fp32"
    profiles: list[Profile] = field(default_factory=list)
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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _gpu() -> dict[str, str]:
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(0)
            return {"name": torch.cuda.get_device_name(0), "compute_capability": f"{major}.{minor}"}
    except ImportError:
        pass
    return {"name": "unknown", "compute_capability": "unknown"}


def configure(trt: Any, builder: Any, network: Any, options: BuildOptions) -> tuple[Any, list[str]]:
    """An IBuilderConfig for ``options``; refuses what this TensorRT lacks, by name."""
    config = builder.create_builder_config()
    refused: list[str] = []

    def flag(name: str, what: str) -> None:
        if not hasattr(trt.BuilderFlag, name):
            refused.append(f"{what} (TensorRT {trt.__version__} has no BuilderFlag.{name})")
        else:
            config.set_flag(getattr(trt.BuilderFlag, name))

    if options.precision not in PRECISIONS:
        raise RNNXError(f"precision: expected one of {', '.join(PRECISIONS)}, found {options.precision!r}")
    if options.precision == "fp32" and hasattr(trt.BuilderFlag, "TF32"):
        config.clear_flag(trt.BuilderFlag.TF32)  # fp32 means fp32; ask for tf32 by name
    elif options.precision != "fp32":
        flag(options.precision.upper(), options.precision)
        if options.precision == "int8" and not builder.platform_has_fast_int8:
            refused.append("int8 (this GPU has no fast INT8)")
    if options.workspace_bytes:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, options.workspace_bytes)
    if options.optimization_level is not None:
        if hasattr(config, "builder_optimization_level"):
            config.builder_optimization_level = options.optimization_level
        else:
            refused.append("builder optimization level (needs TensorRT 8.6)")
    if options.dla_core is not None:
        if builder.num_DLA_cores <= options.dla_core:
            refused.append(f"DLA core {options.dla_core} (this device has {builder.num_DLA_cores})")
        else:
            config.default_device_type = trt.DeviceType.DLA
            config.DLA_core = options.dla_core
            flag("GPU_FALLBACK", "GPU fallback for DLA")
    if options.hardware_compatible:
        if hasattr(trt, "HardwareCompatibilityLevel"):
            config.hardware_compatibility_level = trt.HardwareCompatibilityLevel.AMPERE_PLUS
        else:
            refused.append("hardware-compatible engines (need TensorRT 8.6)")
    if options.version_compatible:
        flag("VERSION_COMPATIBLE", "version-compatible engines")
    for profile in options.profiles:
        p = builder.create_optimization_profile()
        for name, (lo, opt, hi) in profile.shapes.items():
            p.set_shape(name, lo, opt, hi)
        config.add_optimization_profile(p)
    if options.timing_cache is not None:
        blob = options.timing_cache.read_bytes() if options.timing_cache.exists() else b""
        config.set_timing_cache(config.create_timing_cache(blob), ignore_mismatch=False)
    return config, refused


def build_engine(onnx_path: Path, engine_path: Path, options: BuildOptions) -> dict[str, Any]:
    """Parse, configure, build and serialize; write the engine and its metadata atomically."""
    trt = _import_trt()
    onnx_path = require_file(Path(onnx_path))
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0 if int(trt.__version__.split(".")[0]) >= 10 else 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RNNXError(f"{onnx_path}: TensorRT's ONNX parser refused the model: {errors[:400]}; `rnnx inspect` lists what it accepts")
    config, refused = configure(trt, builder, network, options)
    if refused:
        raise RNNXError("TensorRT cannot honour: " + "; ".join(refused) + "; drop those options")
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RNNXError(f"TensorRT failed to build an engine from {onnx_path}; rerun with --debug and see its log above")
    meta = {
        "tensorrt": trt.__version__,
        "gpu": _gpu(),
        "precision": options.precision,
        "profiles": [{k: [list(s) for s in v] for k, v in p.shapes.items()} for p in options.profiles],
        "hardware_compatible": options.hardware_compatible,
        "version_compatible": options.version_compatible,
        "dla_core": options.dla_core,
        "source": {"path": str(onnx_path), "sha256": _sha256(onnx_path)},
    }
    with atomic_output(Path(engine_path)) as tmp:
        tmp.write_bytes(bytes(serialized))
    with atomic_output(metadata_path(engine_path)) as tmp:
        tmp.write_text(json.dumps(meta, indent=2))
    if options.timing_cache is not None:
        with atomic_output(options.timing_cache) as tmp:
            tmp.write_bytes(bytes(config.get_timing_cache().serialize()))
    return meta


def default_profile(spec: Any) -> Profile:
    """For --from-weights: sequences of 1..200 steps (opt 50), batches of 1..32 (opt 8)."""
    n, out = spec.num_layers * spec.num_directions, spec.output_size
    shapes = {"X": ((1, 1, spec.input_size), (50, 8, spec.input_size), (200, 32, spec.input_size)), "h0": ((n, 1, out), (n, 8, out), (n, 32, out))}
    if spec.cell == "lstm":
        shapes["c0"] = ((n, 1, spec.hidden_size), (n, 8, spec.hidden_size), (n, 32, spec.hidden_size))
    return Profile(shapes)


def build_from_weights(weights: Any, engine_path: Path, options: BuildOptions) -> dict[str, Any]:
    """Canonical weights -> the lowered ONNX stack (written beside the engine) -> engine."""
    from rnnx.formats.onnx_build import build_stack_model, save_model
    from rnnx.graphs.lower import lower_recurrences

    _import_trt()  # fail before writing anything
    model = build_stack_model(weights)
    lower_recurrences(model)
    onnx_path = Path(str(engine_path) + ".onnx")
    save_model(model, onnx_path)
    if not options.profiles:
        options.profiles = [default_profile(weights.spec)]
    return build_engine(onnx_path, engine_path, options)


def metadata_path(engine_path: Path) -> Path:
    return Path(str(engine_path) + ".json")


def check_metadata(meta: dict[str, Any], trt_version: str, gpu: dict[str, str]) -> None:
    """Refuse an engine built for another TensorRT or GPU, as TensorRT itself would, but readably."""
    if meta.get("tensorrt") != trt_version and not meta.get("version_compatible"):
        raise RNNXError(f"engine built with TensorRT {meta.get('tensorrt')}, this is {trt_version}; rebuild it here or build with --version-compatible")
    built_cc, here_cc = meta.get("gpu", {}).get("compute_capability"), gpu.get("compute_capability")
    if built_cc != here_cc and not meta.get("hardware_compatible") and "unknown" not in (built_cc, here_cc):
        raise RNNXError(f"engine built for compute capability {built_cc}, this GPU is {here_cc}; rebuild it here or build with --hardware-compatible")


class TensorRTRunner:
    """Runs a serialized engine: named numpy inputs in, named numpy outputs out (CUDA memory via torch)."""

    device = "cuda"

    def __init__(self, engine_path: Path) -> None:
        trt = _import_trt()
        import torch

        engine_path = require_file(Path(engine_path))
        meta_file = metadata_path(engine_path)
        if not meta_file.exists():
            raise RNNXError(f"{engine_path}: no {meta_file.name} beside it; rnnx loads only engines whose build it can check")
        self.meta = json.loads(meta_file.read_text())
        check_metadata(self.meta, trt.__version__, _gpu())
        self.precision = self.meta.get("precision", "fp32")
        self.torch = torch
        runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        self.engine = runtime.deserialize_cuda_engine(engine_path.read_bytes())
        if self.engine is None:
            raise RNNXError(f"{engine_path}: TensorRT could not deserialize the engine")
        self.context = self.engine.create_execution_context()
        self.names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.inputs = [n for n in self.names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.trt = trt

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch, trt = self.torch, self.trt
        buffers = {}
        for name in self.inputs:
            if name not in inputs:
                raise RNNXError(f"engine input {name!r} missing; expected {self.inputs}")
            array = np.ascontiguousarray(inputs[name], dtype=trt.nptype(self.engine.get_tensor_dtype(name)))
            buffers[name] = torch.from_numpy(array).cuda()
            self.context.set_input_shape(name, array.shape)
        outputs = {}
        for name in self.names:
            if name in buffers:
                continue
            shape = tuple(self.context.get_tensor_shape(name))
            dtype = trt.nptype(self.engine.get_tensor_dtype(name))
            buffers[name] = torch.empty(shape, dtype=getattr(torch, np.dtype(dtype).name), device="cuda")
            outputs[name] = buffers[name]
        for name, tensor in buffers.items():
            self.context.set_tensor_address(name, tensor.data_ptr())
        stream = torch.cuda.current_stream()
        if not self.context.execute_async_v3(stream.cuda_stream):
            raise RNNXError("TensorRT failed to run the engine (execute_async_v3 returned false)")
        stream.synchronize()
        return {name: t.cpu().numpy() for name, t in outputs.items()}
