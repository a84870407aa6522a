"""``rnnx doctor``: what is installed, and, where a GPU and cuDNN are, whether rnnx's cuDNN
offset table agrees with cuDNN itself and with PyTorch's flattened buffer."""

from __future__ import annotations

import importlib.metadata
import json
import platform
from typing import Any

from rnnx.engines import cudnn_check
from rnnx.engines.cudnn import CudnnRunner
from rnnx.engines.torch import build_module
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights


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


def _runner_vs_torch(spec: Any) -> float:
    """Max abs difference between rnnx's blob run by cuDNN directly and PyTorch's CUDA module."""
    import numpy as np
    import torch

    from rnnx.parity import random_inputs

    weights = RNNWeights.random(spec, seed=0)
    inputs = random_inputs(weights, 17, 4, seed=1)
    runner = CudnnRunner(weights)
    try:
        ours = runner(inputs)
    finally:
        runner.close()
    module = build_module(weights).cuda()
    state = torch.from_numpy(inputs["h0"]).cuda()
    if spec.cell == "lstm":
        state = (state, torch.from_numpy(inputs["c0"]).cuda())
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        y, _ = module(torch.from_numpy(inputs["X"]).cuda(), state)
    return float(np.abs(ours["Y"] - y.cpu().numpy()).max())


def layout_check(specs: list[str] | None = None) -> dict[str, Any]:
    """Per spec: identical, different (with the first differing entry), or not checked (and why)."""
    texts = specs or list(cudnn_check.DEFAULT_SPECS)
    if not environment()["gpu"]:
        return {"specs": {t: {"verdict": "not checked", "why": "no CUDA GPU visible to torch"} for t in texts}, "passed": None}
    rows = {}
    for text in texts:
        spec = RNNSpec.parse(text)
        params, buffer = cudnn_check.against_cudnn(spec), cudnn_check.against_torch(spec)
        runner_err = _runner_vs_torch(spec)
        row: dict[str, Any] = {"cudnnGetRNNWeightParams": params["passed"], "torch_buffer": buffer["passed"], "cudnn_runner_vs_torch_max_abs": runner_err}
        same = params["passed"] and buffer["passed"] and runner_err < 1e-4
        row["verdict"] = "identical" if same else "different"
        if params["mismatches"]:
            row["first_difference"] = params["mismatches"][0]
        rows[str(spec)] = row
    return {"specs": rows, "passed": all(r["verdict"] == "identical" for r in rows.values())}


def as_text(info: dict[str, Any], check: dict[str, Any]) -> str:
    lines = [f"{k:<22} {v if v is not None else 'not installed'}" for k, v in info.items() if k not in ("gpu", "onnxruntime_providers")]
    lines.append(f"{'onnxruntime providers':<22} {', '.join(info.get('onnxruntime_providers') or []) or '-'}")
    gpu = info.get("gpu")
    lines.append(f"{'gpu':<22} {gpu['name'] + ' (sm ' + gpu['compute_capability'] + ', CUDA ' + str(gpu['cuda']) + ')' if gpu else 'none visible to torch'}")
    unchecked = {row.get("why") for row in check["specs"].values() if row["verdict"] == "not checked"}
    if len(unchecked) == 1 and all(row["verdict"] == "not checked" for row in check["specs"].values()):
        # one reason for every spec (no GPU): one line, not one per spec (--json lists them)
        lines.append(f"cuDNN layout: not checked ({unchecked.pop()}; {len(check['specs'])} specs wait for a GPU: run rnnx doctor where one is)")
        return "\n".join(lines)
    for spec, row in check["specs"].items():
        if row["verdict"] == "not checked":
            detail = row["why"]
        elif row["verdict"] == "identical":
            detail = f"offsets = cudnnGetRNNWeightParams, blob = torch's buffer, cuDNN runner vs torch {row['cudnn_runner_vs_torch_max_abs']:.1e}"
        else:
            detail = json.dumps({k: v for k, v in row.items() if k != "verdict"}, default=str)
        lines.append(f"cuDNN layout {spec}: {row['verdict']} ({detail})")
    return "\n".join(lines)
