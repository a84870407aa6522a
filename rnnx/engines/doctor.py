"""``rnnx doctor``: what is installed, and, where a GPU and cuDNN are, whether rnnx's cuDNN
offset table agrees with cuDNN itself and with PyTorch's flattened buffer."""

from __future__ import annotations

import importlib.metadata
import platform
from typing import Any


def _version(distribution: str) -> str | None:
    """The installed version, read from package metadata (importing keras or tensorrt has side effects)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    info: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine()}
    for name in ("numpy", "onnx", "onnxruntime", "onnxruntime-gpu", "onnxscript", "safetensors", "torch", "keras", "jax", "tensorrt", "polygraphy"):
        info[name] = _version(name)
    if info["onnxruntime"] or info["onnxruntime-gpu"]:
        import onnxruntime

        info["onnxruntime_providers"] = onnxruntime.get_available_providers()
    info["gpu"] = None
    if info["torch"]:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(0)
            info["gpu"] = {"name": torch.cuda.get_device_name(0), "compute_capability": f"{major}.{minor}", "cuda": torch.version.cuda}
            info["cudnn"] = torch.backends.cudnn.version()
    return info


def layout_check(specs: list[str] | None = None) -> dict[str, Any] | None:
    """None without a GPU; else per spec whether cuDNN and PyTorch agree with rnnx's table."""
    from rnnx.engines import cudnn_check
    from rnnx.spec import RNNSpec

    info = environment()
    if not info["gpu"]:
        return None
    rows = {}
    for text in specs or list(cudnn_check.DEFAULT_SPECS):
        spec = RNNSpec.parse(text)
        rows[str(spec)] = {"cudnnGetRNNWeightParams": cudnn_check.against_cudnn(spec)["passed"], "torch_buffer": cudnn_check.against_torch(spec)["passed"]}
    return {"specs": rows, "passed": all(all(r.values()) for r in rows.values())}


def as_text(info: dict[str, Any], check: dict[str, Any] | None) -> str:
    lines = [f"{k:<22} {v if v is not None else 'not installed'}" for k, v in info.items() if k not in ("gpu", "onnxruntime_providers")]
    lines.append(f"{'onnxruntime providers':<22} {', '.join(info.get('onnxruntime_providers') or []) or '-'}")
    gpu = info.get("gpu")
    lines.append(f"{'gpu':<22} {gpu['name'] + ' (sm ' + gpu['compute_capability'] + ', CUDA ' + str(gpu['cuda']) + ')' if gpu else 'none visible to torch'}")
    if check is None:
        lines.append("cuDNN layout check: skipped (needs a CUDA GPU and a CUDA build of torch)")
    else:
        for spec, row in check["specs"].items():
            verdict = "ok" if all(row.values()) else "MISMATCH " + ", ".join(k for k, v in row.items() if not v)
            lines.append(f"cuDNN layout {spec}: {verdict}")
    return "\n".join(lines)
