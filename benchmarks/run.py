"""rnnx's benchmarks: ratios measured side by side in one process, interleaved, medians.

Run: make bench   (writes benchmarks/results.json and benchmarks/results.md, and the table
between the markers in docs/benchmarks.md). Not part of the test run. Sections:
1. an LSTMCell stepped over time: rnnx's fused export vs torch.onnx's unrolled one vs torch
2. bigger stacks in ONNX Runtime: rnnx vs torch.onnx vs torch eager
3. cuDNN pack/unpack of ~1.5 GB of weights vs a plain copy, with peak memory
4. rnnx.export with its self-check vs torch.onnx.export alone (Dim.AUTO): a 2-layer
   bidirectional LSTM with H=1024, and every corpus family (tests/exporters/corpus.py)
5. on a GPU: the cuDNN runner vs torch's cuDNN path (where a GPU is visible)
6. verify_large: the command `rnnx verify` of a 67M-parameter LSTM at its default shapes, less its
   process's start-up and imports, vs its backends' own runs (ONNX Runtime, torch and the float64
   reference on the same inputs), and the float64 reference with its BLAS thread rule vs
   unlimited threads, with no load added and with every usable core kept busy by other processes
7. fuse_scaling: `rnnx fuse` of an unrolled LSTMCell exported by torch.onnx at T = 100, 300 and
   1,000 steps, without and with its ONNX Runtime check, vs a plain onnx.load + onnx.save of
   the same file: seconds, ratio and cost per step, so that growth in T shows
8. large_convert: `rnnx convert` of a 370 MB and a 1.5 GB checkpoint (4-layer bidirectional
   LSTMs), every source format to every target, each in its own process with --no-check: its
   time against `cp` of the same file and its peak memory against the file's size (see
   benchmarks/large_convert.py, which also runs alone)
9. streaming: a streaming speech model (40 log-mels -> causal Conv1d k=3 -> 2-layer LSTM H=256 ->
   Linear to 32) exported with streaming=True: one chunk of 1 and of 10 frames with its states,
   ONNX Runtime vs torch eager carrying the same states, both on 1 thread; 500 frames in 10-frame
   chunks vs one 500-frame run of the same file; the chunked outputs held to torch's whole sequence
Run one section with --only, e.g. `python benchmarks/run.py --only verify_large`.
"""

from __future__ import annotations

import argparse
import random
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
warnings.simplefilter("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import rnnx  # noqa: E402
from rnnx import RNNSpec, RNNWeights  # noqa: E402
from rnnx.engines.onnxruntime import OnnxRuntimeRunner  # noqa: E402
from rnnx.exporters.writing import quiet as _quiet  # noqa: E402
from rnnx.layouts import cudnn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import large_convert  # noqa: E402

BEGIN, END = "<!-- bench-table:begin -->", "<!-- bench-table:end -->"


def interleaved(candidates: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median seconds per call; one call of each candidate per round, rounds repeated. Each
    round runs them in a new (seeded) order, so that none always follows the same one (one
    that always ran right after torch would find the caches cold, paying for torch's traffic)."""
    times: dict[str, list[float]] = {k: [] for k in candidates}
    for fn in candidates.values():
        fn()  # warm up
    items = list(candidates.items())
    order = random.Random(0)
    for _ in range(repeats):
        order.shuffle(items)
        for name, fn in items:
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


class SteppedCell(torch.nn.Module):
    def __init__(self, i: int, h: int) -> None:
        super().__init__()
        self.cell, self.h = torch.nn.LSTMCell(i, h), h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.shape[1], self.h)
        c = x.new_zeros(x.shape[1], self.h)
        ys = []
        for t in range(x.shape[0]):
            h, c = self.cell(x[t], (h, c))
            ys.append(h)
        return torch.stack(ys)


def _ts_export(model: torch.nn.Module, example: tuple, path: Path, dynamic: dict | None = None) -> None:
    names = [f"in{i}" for i in range(len(example))]
    with _quiet():
        torch.onnx.export(model, example, str(path), dynamo=False, opset_version=17, input_names=names, dynamic_axes=dynamic)


def stepped_cell(tmp: Path, repeats: int) -> dict:
    torch.manual_seed(0)
    model = SteppedCell(64, 256).eval()
    torch.set_num_threads(1)
    out: dict = {"setup": "LSTMCell(64, 256) stepped over T, B=1, ONNX Runtime and torch on 1 thread"}
    x100 = torch.randn(100, 1, 64)
    rnnx.export(model, (torch.randn(100, 1, 64),), tmp / "fused.onnx", check=False)  # a batch-1 example, as streaming models have
    _ts_export(model, (x100,), tmp / "unrolled.onnx")
    import onnx

    out["nodes"] = {"rnnx": len(onnx.load(str(tmp / "fused.onnx")).graph.node), "torch.onnx": len(onnx.load(str(tmp / "unrolled.onnx")).graph.node)}
    fused, unrolled = OnnxRuntimeRunner(tmp / "fused.onnx", threads=1), OnnxRuntimeRunner(tmp / "unrolled.onnx", threads=1)
    for T in (10, 100, 1000):
        x = torch.randn(T, 1, 64)
        cands: dict[str, Callable[[], object]] = {"rnnx (ORT)": lambda: fused({fused.input_names[0]: x.numpy()})}
        try:
            unrolled({"in0": x.numpy()})
            cands["torch.onnx unrolled (ORT)"] = lambda: unrolled({"in0": x.numpy()})
        except rnnx.RNNXError:
            out[f"T={T} unrolled"] = f"does not run at T={T} (traced at T=100)"
        with torch.no_grad():
            cands["torch eager"] = lambda: model(x)
            t = interleaved(cands, repeats)
        out[f"T={T}"] = {k: round(v * 1e3, 3) for k, v in t.items()}
        if "torch.onnx unrolled (ORT)" in t:
            out[f"T={T} ratio rnnx/unrolled"] = round(t["rnnx (ORT)"] / t["torch.onnx unrolled (ORT)"], 3)
        out[f"T={T} ratio rnnx/torch"] = round(t["rnnx (ORT)"] / t["torch eager"], 3)
    torch.set_num_threads(os.cpu_count() or 1)
    return out


def stacks(tmp: Path, repeats: int) -> dict:
    torch.manual_seed(0)
    models = {
        "LSTM 2x bidirectional H=512": torch.nn.LSTM(256, 512, num_layers=2, bidirectional=True),
        "GRU 2 layers H=512": torch.nn.GRU(256, 512, num_layers=2),
        "LSTM H=512 proj=128": torch.nn.LSTM(256, 512, proj_size=128),
    }
    out = {}
    x = torch.randn(100, 8, 256)
    for name, m in models.items():
        m.eval()
        rnnx.export(m, (torch.randn(50, 4, 256),), tmp / "r.onnx", check=False)
        r = OnnxRuntimeRunner(tmp / "r.onnx")
        cands: dict[str, Callable[[], object]] = {"rnnx (ORT)": lambda: r({r.input_names[0]: x.numpy()})}
        try:
            _ts_export(m, (x,), tmp / "t.onnx", {"in0": {0: "T", 1: "B"}})
            t_run = OnnxRuntimeRunner(tmp / "t.onnx")
            cands["torch.onnx (ORT)"] = lambda: t_run({"in0": x.numpy()})
        except Exception as exc:  # noqa: BLE001  recorded, not hidden
            out[f"{name} torch.onnx"] = f"export fails: {str(exc).splitlines()[0][:80]}"
        with torch.no_grad():
            cands["torch eager"] = lambda: m(x)
            t = interleaved(cands, repeats)
        out[name] = {k: round(v * 1e3, 2) for k, v in t.items()}
    out["setup"] = "T=100, B=8, input 256, ONNX Runtime CPU with default threads"
    return out


def pack_unpack(repeats: int) -> dict:
    spec = RNNSpec.parse("lstm,input=2048,hidden=2048,layers=4,bidirectional")
    weights = RNNWeights.random(spec, seed=0, scale=0.01)
    nbytes = sum(v.nbytes for v in weights.tensors.values())
    flat = np.concatenate([v.reshape(-1) for v in weights.tensors.values()])
    t = interleaved({"pack": lambda: cudnn.to_native(weights), "copy": lambda: flat.copy()}, repeats)
    blob = cudnn.to_native(weights)
    t_unpack = interleaved({"unpack": lambda: cudnn.from_native(blob, spec)}, repeats)["unpack"]
    del blob
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    packed = cudnn.to_native(weights)
    peak = tracemalloc.get_traced_memory()[1] - base
    unpacked = cudnn.from_native(packed, spec)
    peak_unpack = tracemalloc.get_traced_memory()[1] - base - packed.nbytes
    tracemalloc.stop()
    del unpacked, packed, flat
    return {
        "setup": f"{spec}: {nbytes / 2**30:.2f} GiB of float32",
        "pack GB/s": round(nbytes / t["pack"] / 1e9, 2),
        "copy GB/s": round(nbytes / t["copy"] / 1e9, 2),
        "ratio pack/copy throughput": round(t["copy"] / t["pack"], 3),
        "unpack ms": round(t_unpack * 1e3, 2),
        "peak memory during pack / weights": round((peak + nbytes) / nbytes, 3),
        "extra memory during unpack / weights": round(max(peak_unpack, 0) / nbytes, 4),
    }


def _export_ratio(model: torch.nn.Module, example: tuple, tmp: Path, repeats: int, hand: object = None) -> dict:
    """rnnx.export with its self-check against torch.onnx.export alone with Dim.AUTO on every
    dimension (the same route rnnx builds on, no axes written by hand), both at opset 17;
    with ``hand``, also against torch.onnx.export with those dynamic shapes written by hand."""
    from torch.utils._pytree import tree_map

    auto = tree_map(lambda x: {d: torch.export.Dim.AUTO for d in range(x.dim())} if isinstance(x, torch.Tensor) else None, example)

    def plain(shapes: object) -> Callable[[], None]:
        def run() -> None:
            with _quiet():
                torch.onnx.export(model, example, str(tmp / "p.onnx"), dynamic_shapes=shapes, opset_version=17)
        return run

    candidates = {"rnnx.export + self-check": lambda: rnnx.export(model, example, tmp / "e.onnx"), "torch.onnx.export": plain(auto)}
    if hand is not None:
        candidates["torch.onnx.export, axes by hand"] = plain(hand)
    t = interleaved(candidates, repeats)
    out = {**{k: round(v, 2) for k, v in t.items()}, "ratio": round(t["rnnx.export + self-check"] / t["torch.onnx.export"], 3)}
    if hand is not None:
        out["ratio to axes by hand"] = round(t["rnnx.export + self-check"] / t["torch.onnx.export, axes by hand"], 3)
    return out


def export_time(tmp: Path, repeats: int) -> dict:
    from tests.exporters.corpus import FAMILIES

    torch.manual_seed(0)
    big = torch.nn.LSTM(1024, 1024, num_layers=2, bidirectional=True).eval()
    hand = ({0: torch.export.Dim("seq"), 1: torch.export.Dim("batch")},)
    out: dict = {"lstm": {"setup": "2-layer bidirectional LSTM H=1024, example (T=20, B=4)", **_export_ratio(big, (torch.randn(20, 4, 1024),), tmp, repeats, hand)}}
    corpus = {}
    for family in FAMILIES:
        torch.manual_seed(0)
        try:
            corpus[family.name] = _export_ratio(family.make().eval(), family.example(3, 12, 1), tmp, repeats)
        except Exception as exc:  # torch.onnx alone cannot export some families; they have no ratio
            corpus[family.name] = {"skipped": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:80]}"}
    ratios = sorted((r["ratio"], name) for name, r in corpus.items() if "ratio" in r)
    median_ratio, median_name = ratios[len(ratios) // 2]
    out["corpus"] = corpus
    out["corpus median"] = {"family": median_name, "ratio": median_ratio, "families measured": len(ratios)}
    return out


def gpu(repeats: int) -> dict:
    if not torch.cuda.is_available():
        return {"skipped": "no CUDA GPU visible"}
    from rnnx.engines.cudnn import CudnnRunner
    from rnnx.engines.torch import build_module

    out = {"gpu": torch.cuda.get_device_name(0)}
    spec = RNNSpec.parse("lstm,input=256,hidden=512,layers=2,bidirectional")
    weights = RNNWeights.random(spec, seed=0)
    module = build_module(weights).cuda()
    runner = CudnnRunner(weights)
    for B in (1, 8):
        for T in (50, 200):
            x = np.random.default_rng(0).standard_normal((T, B, 256)).astype(np.float32)
            xt = torch.from_numpy(x).cuda()

            def torch_run() -> None:
                with torch.no_grad():
                    module(xt)
                torch.cuda.synchronize()

            t = interleaved({"cuDNN runner (incl. host copies)": lambda: runner({"X": x}), "torch cuDNN": torch_run}, repeats)
            out[f"B={B} T={T}"] = {k: round(v * 1e3, 3) for k, v in t.items()}
    out["TensorRT"] = "not measured: TensorRT is not installed on the machines available"
    return out


LARGE_SPEC = "lstm,input=2048,hidden=2048,layers=2"  # 67,141,632 parameters


def _burners(n: int) -> list[subprocess.Popen]:
    """n processes that each keep one core busy: a machine where others hold the cores."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _run_command(argv: list[str]) -> None:
    subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})


def _imports_of(argv: list[str]) -> list[str]:
    """The modules a command imports at the top level of its import tree, read from one run of it
    under ``python -X importtime``: what a process starting that command pays for before and
    while it works (torch and onnx are imported lazily, inside verify)."""
    done = subprocess.run([sys.executable, "-X", "importtime", *argv[1:]], check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    names = []
    for line in done.stderr.splitlines():
        fields = line.split("|")
        top_level = len(fields) == 3 and fields[1].strip().isdigit() and fields[2].startswith(" ") and not fields[2].startswith("  ")
        if line.startswith("import time:") and top_level:
            names.append(fields[2].strip())
    return list(dict.fromkeys(names))


def verify_large(tmp: Path, repeats: int) -> dict:
    """`rnnx verify` at its defaults (ort, torch and the reference; lengths and batches shrunk for
    a model this size), as a command in its own process, split into the process's start-up and
    imports (a process that starts and imports what the command imports, and exits) and the
    rest; the rest against the backends' own runs on the same inputs in this process: ONNX
    Runtime with its session loaded beforehand, torch with its module built beforehand, and the
    float64 reference. Also verify called in this process (imports already paid), and the
    reference with rnnx's BLAS thread rule vs numpy's BLAS left unlimited (the rule switched off)."""
    from rnnx import blas_threads, parity
    from rnnx.engines.torch import TorchRunner
    from rnnx.pipelines.convert import convert
    from rnnx.verify.run import _default_shapes, verify

    weights = RNNWeights.random(RNNSpec.parse(LARGE_SPEC), seed=0)
    source, model = tmp / "large.safetensors", tmp / "large.onnx"
    rnnx.save(weights, source)
    convert(source, model, check=False)  # the check would run the reference too; verify is what is timed
    seq_lens, batches, _ = _default_shapes(weights, None, None)
    inputs = [parity.random_inputs(weights, T, B, seed=k) for k, (T, B) in enumerate((T, B) for T in seq_lens for B in batches)]
    t = time.perf_counter()
    ort = OnnxRuntimeRunner(model)
    session_s = time.perf_counter() - t
    torch_runner = TorchRunner(weights.astype(np.float32))  # as verify builds it
    command = [sys.executable, "-m", "rnnx", "verify", str(model), "--against", str(source)]
    startup = [sys.executable, "-c", f"import {', '.join(_imports_of(command))}"]

    def ort_runs() -> None:
        for inp in inputs:
            ort({k: v for k, v in inp.items() if k in ort.input_names})

    def torch_runs() -> None:
        for inp in inputs:
            torch_runner(inp)

    def reference_runs() -> None:
        for inp in inputs:
            parity.reference_outputs(weights, inp)

    def verify_run() -> None:
        report = verify(source, model)
        assert report.passed and report.shapes["seq_lens"] == seq_lens, report

    def unlimited(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            with mock.patch.object(blas_threads, "_blas", lambda: None):  # as without threadpoolctl: nothing limited
                fn()
        return run

    candidates = {
        "ORT runs alone": ort_runs,
        "torch runs alone": torch_runs,
        "reference, thread rule": reference_runs,
        "reference, threads unlimited": unlimited(reference_runs),
        "verify, thread rule": verify_run,
        "verify, threads unlimited": unlimited(verify_run),
        "rnnx verify command": lambda: _run_command(command),  # exits 0 only when verify passed
        "start-up and imports": lambda: _run_command(startup),
    }
    cores = blas_threads.usable_cores()
    out: dict = {
        "setup": f"{LARGE_SPEC} ({weights.num_parameters():,} parameters), verify's defaults: lengths {seq_lens} x batches {batches}, "
                 f"backends ort, torch, reference; the command `rnnx verify` in its own process, its start-up and imports timed as a "
                 f"process importing what it imports ({len(startup[-1].split(','))} top-level modules, torch and onnx among them); "
                 f"the backends alone in-process with default threads, ORT's session and torch's module made beforehand; {cores} usable cores",
        "parameters": weights.num_parameters(),
        "ORT session load s": round(session_s, 2),
    }
    for condition in ("quiet", "busy"):
        burners = _burners(cores) if condition == "busy" else []
        try:
            time.sleep(2 if burners else 0)
            load_before = os.getloadavg()[0]
            ort_runs()
            torch_runs()
            reference_runs()  # warm up (the weights' float64 copies, ORT's arenas)
            print(f"   {condition}: bulk BLAS threads by the rule now {blas_threads.bulk_threads(cores, os.getloadavg()[0])}", flush=True)
            times: dict[str, list[float]] = {k: [] for k in candidates}
            for _ in range(repeats):
                for name, fn in candidates.items():
                    gc.collect()
                    t = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - t)
                    print(f"   {condition} {name}: {times[name][-1]:.2f} s", flush=True)
            load_after = os.getloadavg()[0]
        finally:
            for p in burners:
                p.kill()
                p.wait()
        out[condition] = _verify_figures(condition, cores, times, (load_before, load_after))
        print(f"   {condition}: {_verify_line(out[condition])}", flush=True)
    return out


def _verify_figures(condition: str, cores: int, times: dict[str, list[float]], load: tuple[float, float]) -> dict:
    """Medians of each candidate's seconds, and each ratio as the median of its rounds' own ratios:
    a ratio's two sides from the same round, so that load drifting between rounds (other
    users, the burners' scheduling) moves both."""
    rounds = range(len(times["rnnx verify command"]))
    backends = [times["ORT runs alone"][k] + times["torch runs alone"][k] + times["reference, thread rule"][k] for k in rounds]

    def ratio(over: list[float], under: list[float]) -> float:
        return round(statistics.median(a / b for a, b in zip(over, under)), 2)

    rest = [times["rnnx verify command"][k] - times["start-up and imports"][k] for k in rounds]
    return {
        "condition": "no load added by the benchmark" if condition == "quiet" else f"{cores} processes each keeping a core busy",
        "1-minute load average before / after": [round(load[0], 2), round(load[1], 2)],
        **{f"{k} s": round(statistics.median(v), 2) for k, v in times.items()},
        "backends, ORT + torch + reference s": round(statistics.median(backends), 2),
        "command less start-up and imports s": round(statistics.median(rest), 2),
        "ratio (command - start-up) / backends": ratio(rest, backends),
        "ratio verify in-process / backends": ratio(times["verify, thread rule"], backends),
        "ratio verify / ORT runs": ratio(times["verify, thread rule"], times["ORT runs alone"]),
        "ratio verify unlimited / rule": ratio(times["verify, threads unlimited"], times["verify, thread rule"]),
        "ratio reference unlimited / rule": ratio(times["reference, threads unlimited"], times["reference, thread rule"]),
    }


def _verify_line(r: dict) -> str:
    """The figure of the table's verify row: start-up apart from the rest, and the ratio."""
    return (f"{r['ratio (command - start-up) / backends']}x (medians: command {r['rnnx verify command s']} s, of which start-up and imports "
            f"{r['start-up and imports s']} s and the rest {r['command less start-up and imports s']} s; backends {r['backends, ORT + torch + reference s']} s: "
            f"ORT {r['ORT runs alone s']} s + torch {r['torch runs alone s']} s + reference {r['reference, thread rule s']} s; "
            f"verify in-process {r['verify, thread rule s']} s: {r['ratio verify in-process / backends']}x)")


FUSE_STEPS = (100, 300, 1000)


def fuse_scaling(tmp: Path, repeats: int) -> dict:
    """rnnx fuse (check off, and on) against onnx.load + onnx.save of the same unrolled graph,
    at several step counts: a linear pass keeps the cost per step flat as T grows."""
    import onnx

    from rnnx.pipelines.fuse import fuse_file

    torch.manual_seed(0)
    model = SteppedCell(64, 256).eval()
    out: dict = {"setup": "LSTMCell(64, 256) stepped over T, B=1, exported by torch.onnx (TorchScript, opset 17); "
                          "fuse via rnnx.pipelines.fuse.fuse_file; medians"}
    for T in FUSE_STEPS:
        src = tmp / f"unrolled{T}.onnx"
        _ts_export(model, (torch.randn(T, 1, 64),), src)
        nodes = len(onnx.load(str(src)).graph.node)

        def load_save() -> None:
            onnx.save(onnx.load(str(src)), str(tmp / "copy.onnx"))

        def fuse(check: bool) -> Callable[[], None]:
            def run() -> None:
                target = tmp / f"fused{T}.onnx"
                target.unlink(missing_ok=True)
                report = fuse_file(src, target, check=check)
                assert report.chains and report.chains[0]["steps"] == T, report
            return run

        # The check runs ONNX Runtime twice on the whole unrolled graph: fewer rounds at large T.
        t = interleaved({"load+save": load_save, "fuse, no check": fuse(False)}, repeats)
        t["fuse, check"] = interleaved({"fuse, check": fuse(True)}, max(1, repeats // 3))["fuse, check"]
        row = {"nodes": nodes, **{f"{k} s": round(v, 3) for k, v in t.items()}}
        row["ratio fuse/load+save"] = round(t["fuse, no check"] / t["load+save"], 2)
        row["ratio fuse with check/load+save"] = round(t["fuse, check"] / t["load+save"], 2)
        row["fuse ms per step"] = round(t["fuse, no check"] / T * 1e3, 3)
        row["fuse with check ms per step"] = round(t["fuse, check"] / T * 1e3, 3)
        out[f"T={T}"] = row
        print(f"   T={T}: {row}", flush=True)
    first, last = out[f"T={FUSE_STEPS[0]}"], out[f"T={FUSE_STEPS[-1]}"]
    out["per-step cost, T=1000 / T=100"] = round(last["fuse ms per step"] / first["fuse ms per step"], 2)
    return out


class StreamingSpeech(torch.nn.Module):
    """A streaming speech model: log-mels (batch, frames, 40) -> a causal Conv1d (k=3, padded on
    the left with F.pad) -> ReLU -> a 2-layer LSTM (H=256) -> Linear to 32 per frame."""

    def __init__(self, mels: int = 40, channels: int = 128, hidden: int = 256, outputs: int = 32) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(mels, channels, kernel_size=3, padding=0)
        self.lstm = torch.nn.LSTM(channels, hidden, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(hidden, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(torch.nn.functional.pad(x.transpose(1, 2), (2, 0))))
        y, _ = self.lstm(y.transpose(1, 2))
        return self.head(y)

    def step(self, chunk: torch.Tensor, cache: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple:
        """One chunk with its states, in torch: what the streaming file computes (the conv's
        2 frames of left context in ``cache``, the LSTM's ``h`` and ``c``), with the same weights."""
        full = torch.cat((cache, chunk.transpose(1, 2)), dim=2)
        y, (h, c) = self.lstm(torch.relu(self.conv(full)).transpose(1, 2), (h, c))
        return self.head(y), full[..., -2:], h, c


STREAM_FRAMES, STREAM_CHUNKS = 500, (1, 10)


def streaming(tmp: Path, repeats: int) -> dict:
    """A streaming file's latency per chunk in ONNX Runtime (its own session: 1 intra-op and 1
    inter-op thread) against torch eager on 1 thread running the same chunk with the same states,
    each side carrying its states from call to call; and a whole sequence in 10-frame chunks
    against one run of it, in the same file. rnnx.StreamingSession (1 thread) is timed beside
    the bare session, for its own overhead per call. The chunked outputs must match torch's on
    the whole sequence (max abs diff < 1e-4) before anything is timed."""
    import onnxruntime as ort

    from rnnx.streaming import read_streaming

    torch.manual_seed(0)
    model = StreamingSpeech().eval()
    path = tmp / "streaming.onnx"
    rnnx.export(model, (torch.randn(1, 50, 40),), path, streaming=True, check=False)  # checked below, chunk by chunk
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    record = read_streaming(sess.get_modelmeta().custom_metadata_map)
    assert record is not None and record.streamed_inputs == ["x"], record
    names = [o.name for o in sess.get_outputs()]
    pairs = [(s.input, s.output) for s in record.states]
    with mock.patch.dict(os.environ, {"RNNX_ORT_THREADS": "1"}):
        stream = rnnx.StreamingSession(path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out: dict = {"setup": f"40 log-mels -> causal Conv1d(40, 128, k=3) via F.pad -> ReLU -> LSTM(128, 256, 2 layers, batch_first) -> Linear(256, 32), "
                          f"batch 1; ONNX Runtime {ort.__version__} CPU session with 1 intra-op and 1 inter-op thread, torch eager on 1 thread; "
                          "each side carries its states from call to call; medians of interleaved runs",
                 "states": {s.input: list(s.dims) for s in record.states}}
    try:
        def ort_chunks(x: np.ndarray, frames: int) -> np.ndarray:
            states = {s.input: s.zeros(x.shape[0]) for s in record.states}
            ys = []
            for t in range(0, x.shape[1], frames):
                res = dict(zip(names, sess.run(names, {"x": x[:, t:t + frames], **states})))
                states = {i: res[o] for i, o in pairs}
                ys.append(res["output"])
            return np.concatenate(ys, axis=1)

        def eager_chunks(x: torch.Tensor, frames: int) -> torch.Tensor:
            state = (torch.zeros(1, 40, 2), torch.zeros(2, 1, 256), torch.zeros(2, 1, 256))
            ys = []
            for t in range(0, x.shape[1], frames):
                y, *state = model.step(x[:, t:t + frames], *state)
                ys.append(y)
            return torch.cat(ys, dim=1)

        x = torch.randn(1, STREAM_FRAMES, 40)
        xn = x.numpy()
        with torch.no_grad():
            whole = model(x).numpy()
            diffs = {f"ORT in {n}-frame chunks": float(np.abs(ort_chunks(xn, n) - whole).max()) for n in STREAM_CHUNKS}
            diffs["ORT whole, one run"] = float(np.abs(ort_chunks(xn, STREAM_FRAMES) - whole).max())
            diffs["torch eager in 10-frame chunks (the baseline)"] = float(np.abs(eager_chunks(x, 10).numpy() - whole).max())
        out["max abs diff to torch on the whole sequence"] = {k: float(f"{v:.3g}") for k, v in diffs.items()}
        print(f"   max abs diff to torch, {STREAM_FRAMES} frames: {out['max abs diff to torch on the whole sequence']}", flush=True)
        assert all(v < 1e-4 for v in diffs.values()), f"the streaming file does not match torch: {diffs}"

        for frames in STREAM_CHUNKS:
            chunk = torch.randn(1, frames, 40)
            chunk_np = chunk.numpy()
            ort_states = {s.input: s.zeros(1) for s in record.states}
            own_states = {s.input: s.zeros(1) for s in record.states}
            eager_state = [torch.zeros(1, 40, 2), torch.zeros(2, 1, 256), torch.zeros(2, 1, 256)]
            stream.reset()

            def ort_run() -> None:
                res = dict(zip(names, sess.run(names, {"x": chunk_np, **ort_states})))
                ort_states.update({i: res[o] for i, o in pairs})

            def bare_loop() -> None:  # the user's own loop on StreamingSession's session: what the class adds is all that differs
                res = dict(zip(names, stream.runner.session.run(names, {"x": chunk_np, **own_states})))
                own_states.update({i: res[o] for i, o in pairs})

            def eager_run() -> None:
                _, *eager_state[:] = model.step(chunk, *eager_state)

            with torch.no_grad():
                t = interleaved({"ORT session.run": ort_run, "torch eager": eager_run,
                                 "rnnx.StreamingSession.process": lambda: stream.process(chunk_np)}, repeats * 20)
            # StreamingSession against the bare loop, the two alone: torch's runs between them
            # would cool the caches for whichever came next, a cost of the order and not of either
            pair = interleaved({"bare loop": bare_loop, "process": lambda: stream.process(chunk_np)}, repeats * 40)
            row = {f"{k} ms": round(v * 1e3, 4) for k, v in t.items()}
            row["ratio ORT/torch eager"] = round(t["ORT session.run"] / t["torch eager"], 3)
            row["ratio StreamingSession/torch eager"] = round(t["rnnx.StreamingSession.process"] / t["torch eager"], 3)
            row["ratio StreamingSession/ORT session.run"] = round(t["rnnx.StreamingSession.process"] / t["ORT session.run"], 3)
            row["StreamingSession alone with the bare loop: process ms, bare loop ms"] = [round(pair["process"] * 1e3, 4), round(pair["bare loop"] * 1e3, 4)]
            row["ratio StreamingSession/bare loop"] = round(pair["process"] / pair["bare loop"], 3)
            out[f"chunk of {frames}"] = row
            print(f"   chunk of {frames}: {row}", flush=True)

        t = interleaved({"chunks": lambda: ort_chunks(xn, 10), "one run": lambda: ort_chunks(xn, STREAM_FRAMES)}, repeats)
        out[f"{STREAM_FRAMES} frames"] = {"in 10-frame chunks ms": round(t["chunks"] * 1e3, 3), "one run ms": round(t["one run"] * 1e3, 3),
                                          "ratio chunked/one run": round(t["chunks"] / t["one run"], 3)}
        print(f"   {STREAM_FRAMES} frames: {out[f'{STREAM_FRAMES} frames']}", flush=True)
    finally:
        torch.set_num_threads(threads)
    return out


def _streaming_lines(r: dict) -> list[str]:
    """The streaming section's rows of the table."""
    what = "streaming speech model (causal Conv1d k=3 -> 2-layer LSTM H=256 -> Linear, batch 1)"
    lines = []
    for frames in STREAM_CHUNKS:
        c = r[f"chunk of {frames}"]
        ratio = c["ratio ORT/torch eager"]
        lines.append(f"| {what}, one chunk of {frames} frame{'s' if frames > 1 else ''} with its states: ONNX Runtime / torch eager, 1 thread each | "
                     f"{ratio}x ({c['ORT session.run ms']} ms / {c['torch eager ms']} ms; rnnx.StreamingSession {c['rnnx.StreamingSession.process ms']} ms, "
                     f"{c['ratio StreamingSession/torch eager']}x) | <= 0.5x {'(met)' if ratio <= 0.5 else '(MISSED)'} |")
    for frames in STREAM_CHUNKS:
        c = r[f"chunk of {frames}"]
        ratio = c.get("ratio StreamingSession/bare loop")
        if ratio is None:
            continue
        process, bare = c["StreamingSession alone with the bare loop: process ms, bare loop ms"]
        lines.append(f"| the same, one chunk of {frames} frame{'s' if frames > 1 else ''}: rnnx.StreamingSession.process / a bare ONNX Runtime loop "
                     f"carrying the states by hand on the same session, the two interleaved alone | {ratio}x ({process} ms / {bare} ms) | "
                     f"<= 1.1x {'(met)' if ratio <= 1.1 else '(MISSED)'} |")
    w = r[f"{STREAM_FRAMES} frames"]
    ratio = w["ratio chunked/one run"]
    diff = max(r["max abs diff to torch on the whole sequence"].values())
    lines.append(f"| the same, {STREAM_FRAMES} frames in 10-frame chunks / in one run, ONNX Runtime (outputs within {diff:.1e} of torch's whole sequence) | "
                 f"{ratio}x ({w['in 10-frame chunks ms']} ms / {w['one run ms']} ms) | <= 2x {'(met)' if ratio <= 2 else '(MISSED)'} |")
    return lines


def markdown(results: dict) -> str:
    s = results["stepped_cell"]
    p = results["pack_unpack"]
    e = results["export"]
    lines = [
        f"Measured by `make bench` on {results['machine']} (medians of interleaved runs).",
        "",
        "| benchmark | figure | goal |",
        "|---|---|---|",
        f"| LSTMCell stepped, T=100: rnnx / torch.onnx unrolled latency (ORT, 1 thread) | {s['T=100 ratio rnnx/unrolled']}x | <= 0.65x {'(met)' if s['T=100 ratio rnnx/unrolled'] <= 0.65 else '(MISSED)'} |",
        f"| LSTMCell stepped, T=100: rnnx (ORT) / torch eager | {s['T=100 ratio rnnx/torch']}x | <= 1.0x {'(met)' if s['T=100 ratio rnnx/torch'] <= 1.0 else '(MISSED)'} |",
        f"| LSTMCell stepped, T=10 / T=1000: rnnx / torch eager | {s['T=10 ratio rnnx/torch']}x / {s['T=1000 ratio rnnx/torch']}x | unrolled: {s.get('T=10 unrolled', 'runs')} |",
        f"| nodes in the graph (T=100) | rnnx {s['nodes']['rnnx']}, torch.onnx {s['nodes']['torch.onnx']} | |",
        f"| cuDNN pack throughput / plain copy ({p['setup']}) | {p['ratio pack/copy throughput']}x | >= 0.5x {'(met)' if p['ratio pack/copy throughput'] >= 0.5 else '(MISSED)'} |",
        f"| peak memory while packing / weights | {p['peak memory during pack / weights']}x | <= 2.2x {'(met)' if p['peak memory during pack / weights'] <= 2.2 else '(MISSED)'} |",
        f"| rnnx.export with self-check / torch.onnx.export alone, Dim.AUTO ({e['lstm']['setup']}) | {e['lstm']['ratio']}x | <= 1.5x {'(met)' if e['lstm']['ratio'] <= 1.5 else '(MISSED)'} |",
        f"| the same / torch.onnx.export alone with seq and batch Dims written by hand | {e['lstm']['ratio to axes by hand']}x | <= 1.5x {'(met)' if e['lstm']['ratio to axes by hand'] <= 1.5 else '(MISSED)'} |",
        f"| the same, corpus median ({e['corpus median']['family']}, of {e['corpus median']['families measured']} torch.onnx exports) | {e['corpus median']['ratio']}x | <= 1.5x {'(met)' if e['corpus median']['ratio'] <= 1.5 else '(MISSED)'} |",
    ]
    for name, row in results["stacks"].items():
        if isinstance(row, dict):
            lines.append(f"| {name}, {results['stacks']['setup']} | " + ", ".join(f"{k} {v} ms" for k, v in row.items()) + " | |")
        elif name != "setup":
            lines.append(f"| {name} | {row} | |")
    v = results.get("verify_large")
    if v:
        for c in ("quiet", "busy"):
            r = v[c]
            if "ratio (command - start-up) / backends" not in r:  # figures recorded before the command was timed
                lines.append(f"| rnnx verify at its defaults / its ONNX Runtime runs alone, {LARGE_SPEC} ({v['parameters'] / 1e6:.0f}M parameters), {r['condition']} | "
                             f"{r['ratio verify / ORT runs']}x ({r['verify, thread rule s']} s / {r['ORT runs alone s']} s) | |")
                continue
            ratio = r["ratio (command - start-up) / backends"]
            lines.append(f"| `rnnx verify` at its defaults less its start-up and imports / its backends' own runs (ORT + torch + float64 reference), "
                         f"{LARGE_SPEC} ({v['parameters'] / 1e6:.0f}M parameters), {r['condition']} (1-minute load average {r['1-minute load average before / after'][0]}) | "
                         f"{_verify_line(r)} | <= 3x {'(met)' if ratio <= 3 else '(MISSED)'} |")
        lines.append("| the same verify, numpy's BLAS threads unlimited / the reference's thread rule, no load added / busy | "
                     f"{v['quiet']['ratio verify unlimited / rule']}x / {v['busy']['ratio verify unlimited / rule']}x | |")
        lines.append("| its float64 reference alone, threads unlimited / the rule, no load added / busy | "
                     f"{v['quiet']['ratio reference unlimited / rule']}x ({v['quiet']['reference, threads unlimited s']} s / {v['quiet']['reference, thread rule s']} s) / "
                     f"{v['busy']['ratio reference unlimited / rule']}x ({v['busy']['reference, threads unlimited s']} s / {v['busy']['reference, thread rule s']} s) | |")
    f = results.get("fuse_scaling")
    if f:
        for T in FUSE_STEPS:
            r = f[f"T={T}"]
            goal = f"<= 1 s {'(met)' if r['fuse, no check s'] <= 1 else '(MISSED)'}" if T == 1000 else ""
            lines.append(f"| rnnx fuse, LSTMCell unrolled by torch.onnx, T={T} ({r['nodes']} nodes): no check / with check / onnx.load+save | "
                         f"{r['fuse, no check s']} s / {r['fuse, check s']} s / {r['load+save s']} s ({r['ratio fuse/load+save']}x; "
                         f"{r['fuse ms per step']} ms per step) | {goal} |")
        lines.append(f"| rnnx fuse, cost per step at T=1000 / at T=100 (1.0: linear) | {f['per-step cost, T=1000 / T=100']}x | <= 1.5x "
                     f"{'(met)' if f['per-step cost, T=1000 / T=100'] <= 1.5 else '(MISSED)'} |")
    for result in results.get("large_convert", {}).values():
        lines += large_convert.summary(result)
    if results.get("streaming"):
        lines += _streaming_lines(results["streaming"])
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--only", nargs="*", default=None, help="sections to run: stepped_cell stacks pack_unpack export gpu verify_large fuse_scaling large_convert streaming (the others keep their last figures)")
    parser.add_argument("--large-sizes", nargs="*", default=["370M", "1.5G"], help="large_convert's checkpoint sizes to measure (the others keep their last figures)")
    args = parser.parse_args()
    import platform

    here = Path(__file__).parent
    # --only re-measures some sections and keeps the others' last figures.
    previous = json.loads((here / "results.json").read_text()) if args.only and (here / "results.json").exists() else {}
    results: dict = {**previous, "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"}
    with tempfile.TemporaryDirectory() as tmp:
        sections = {
            "stepped_cell": lambda: stepped_cell(Path(tmp), args.repeats),
            "stacks": lambda: stacks(Path(tmp), max(args.repeats // 3, 3)),
            "pack_unpack": lambda: pack_unpack(max(args.repeats // 3, 3)),
            "export": lambda: export_time(Path(tmp), 3),
            "gpu": lambda: gpu(args.repeats),
            "verify_large": lambda: verify_large(Path(tmp), max(args.repeats // 5, 3)),
            "fuse_scaling": lambda: fuse_scaling(Path(tmp), max(args.repeats // 5, 3)),
            "large_convert": lambda: {**previous.get("large_convert", {}),
                                      **{size: large_convert.measure(size, repeats=3 if size == "370M" else 1) for size in args.large_sizes}},
            "streaming": lambda: streaming(Path(tmp), args.repeats),
        }
        for name, fn in sections.items():
            if args.only is None or name in args.only:
                print(f"== {name}", flush=True)
                results[name] = fn()
                print(json.dumps(results[name], indent=2), flush=True)
    if any(section not in results for section in ("stepped_cell", "stacks", "pack_unpack", "export")):
        return  # not enough figures for the table
    (here / "results.json").write_text(json.dumps(results, indent=2))
    table = markdown(results)
    details = [f"\n### large_convert, {size}\n\n" + "\n".join(large_convert.detail(r)) for size, r in results.get("large_convert", {}).items()]
    (here / "results.md").write_text(table + "\n" + "\n".join(details) + ("\n" if details else ""))
    doc = ROOT / "docs" / "benchmarks.md"
    text = doc.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        doc.write_text(f"{head}{BEGIN}\n{table}\n{END}{rest.split(END, 1)[1]}")
    print(table)


if __name__ == "__main__":
    main()
