"""`rnnx convert` of large checkpoints, as a user runs it: each conversion in its own process,
its wall time against `cp` of the same file, and its peak memory (max RSS) against the file's
size.

Run alone: `python benchmarks/large_convert.py --size 370M [--size 1.5G] [--check]`, or as the
`large_convert` section of `benchmarks/run.py`. The sources are written by their owners:
torch's own `safetensors.torch.save_file` and `torch.save` of an `nn.LSTM`'s state_dict; the
ONNX and cuDNN sources are rnnx's own outputs (torch.onnx cannot export a model this size in
the memory here). "Start-up" is the same conversion of a tiny model of the same formats: the
imports and the process, which do not grow with the file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: bidirectional 4-layer LSTMs: hidden 1024 gives 92M parameters (369 MB in float32), 2048 gives 1.48 GB.
SIZES = {"370M": (1024, 1024), "1.5G": (2048, 2048), "tiny": (16, 16)}
#: Keras sources are one Bidirectional(LSTM) layer (a Keras file holds one group per layer), as
#: (input, hidden): 336 MB and 1.61 GB.
KERAS_SIZES = {"370M": (3072, 2048), "1.5G": (8192, 4096), "tiny": (16, 16)}
SOURCES = ("torch.safetensors", "torch.pt", "rnnx.safetensors", "cudnn.safetensors", "cudnn.bin", "onnx", "keras.h5", "keras.keras")
TARGETS = {"onnx": "out.onnx", "cudnn": "out.cudnn.safetensors", "torch": "out.pt", "rnnx": "out.rnnx.safetensors",
           "torch.safetensors": "out.torch.safetensors", "cudnn.bin": "out.bin", "keras": "out.weights.h5"}


def make_sources(folder: Path, size: str) -> dict[str, Path]:
    import torch
    from safetensors.torch import save_file

    hidden, inputs = SIZES[size]
    torch.manual_seed(0)
    module = torch.nn.LSTM(inputs, hidden, num_layers=4, bidirectional=True)
    state = {k: v.detach().contiguous() for k, v in module.state_dict().items()}
    del module
    paths = {"torch.safetensors": folder / "src.safetensors", "torch.pt": folder / "src.pt"}
    save_file(state, str(paths["torch.safetensors"]))
    torch.save(state, str(paths["torch.pt"]))
    del state
    for name, out, to in (("rnnx.safetensors", "src.rnnx.safetensors", "rnnx"), ("cudnn.safetensors", "src.cudnn.safetensors", "cudnn"),
                          ("cudnn.bin", "src.bin", "cudnn"), ("onnx", "src.onnx", "onnx")):
        paths[name] = folder / out
        _rnnx(["convert", str(paths["torch.safetensors"]), "-o", str(paths[name]), "--to", to, "--no-check"])
    # Keras 3 writes both: the legacy .h5 (what Keras 2 users hand over) and the .keras archive.
    inputs, hidden = KERAS_SIZES[size]
    script = ("import sys, keras; m = keras.Sequential([keras.Input((None, %d)), keras.layers.Bidirectional(keras.layers.LSTM(%d, return_sequences=True))]); "
              "m.save(sys.argv[1]); m.save(sys.argv[2])" % (inputs, hidden))
    paths["keras.h5"], paths["keras.keras"] = folder / "src.h5", folder / "src.keras"
    subprocess.run([sys.executable, "-c", script, str(paths["keras.h5"]), str(paths["keras.keras"])], check=True, capture_output=True,
                   env={**os.environ, "KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "jax")})
    return paths


def _spec_args(src: str, size: str) -> list[str]:
    """A raw blob says nothing about itself: its spec is the torch checkpoint's."""
    hidden, inputs = SIZES[size]
    return ["--spec", f"lstm,input={inputs},hidden={hidden},layers=4,bidirectional"] if src == "cudnn.bin" else []


def _rnnx(args: list[str]) -> tuple[float, int, dict]:
    """Run the CLI under /usr/bin/time: (seconds, peak RSS bytes, its JSON)."""
    cmd = ["/usr/bin/time", "-f", "%e %M", sys.executable, "-m", "rnnx", *args, "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
    seconds, kib = done.stderr.strip().splitlines()[-1].split()
    return float(seconds), int(kib) * 1024, json.loads(done.stdout)


def _cp(path: Path, folder: Path, durable: bool = False) -> float:
    """The best of three copies of ``path`` by cp (``durable``: and its fsync, as rnnx
    syncs what it writes before renaming it into place)."""
    best = float("inf")
    for _ in range(3):
        os.sync()
        t = time.perf_counter()
        subprocess.run(["cp", str(path), str(folder / "copy")], check=True)
        if durable:
            fd = os.open(folder / "copy", os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        best = min(best, time.perf_counter() - t)
        (folder / "copy").unlink()
    return best


def _target_args(target: str) -> list[str]:
    return {"cudnn.bin": ["--to", "cudnn"], "torch.safetensors": ["--to", "torch"]}.get(target, ["--to", target])


def measure(size: str, check: bool = False, sources: tuple[str, ...] = SOURCES, targets: tuple[str, ...] = tuple(TARGETS),
            log: bool = True, repeats: int = 3) -> dict:
    """Each conversion and its tiny start-up run ``repeats`` times, alternating: their medians
    (peak memory: the largest), against the best of three copies."""
    with tempfile.TemporaryDirectory(dir=os.environ.get("RNNX_BENCH_TMP")) as tmp, tempfile.TemporaryDirectory() as tiny_tmp:
        folder, tiny = Path(tmp), Path(tiny_tmp)
        paths, tiny_paths = make_sources(folder, size), make_sources(tiny, "tiny")
        rows = []
        for src in sources:
            file_bytes = paths[src].stat().st_size
            cp, cp_sync = _cp(paths[src], folder), _cp(paths[src], folder, durable=True)
            for target in targets:
                if src.split(".")[0] == target.split(".")[0] and src != "onnx":
                    continue  # the same format both sides
                flags = ["--no-check"] if not check else []
                out = folder / TARGETS[target]
                starts, runs = [], []
                for _ in range(repeats):
                    starts.append(_rnnx(["convert", str(tiny_paths[src]), "-o", str(tiny / TARGETS[target]), *_target_args(target), *flags,
                                         *_spec_args(src, "tiny")])[0])
                    for p in tiny.glob(TARGETS[target] + "*"):
                        p.unlink()
                    os.sync()  # no earlier run's dirty pages left to throttle this one's writes
                    runs.append(_rnnx(["convert", str(paths[src]), "-o", str(out), *_target_args(target), *flags, *_spec_args(src, size)]))
                    written = sum(p.stat().st_size for p in folder.glob(TARGETS[target] + "*"))
                    for p in folder.glob(TARGETS[target] + "*"):
                        p.unlink()
                start_s, seconds = statistics.median(starts), statistics.median(r[0] for r in runs)
                peak, report = max(r[1] for r in runs), runs[-1][2]
                row = {"source": src, "target": target, "file MB": round(file_bytes / 1e6), "written MB": round(written / 1e6),
                       "seconds": round(seconds, 2), "start-up s": round(start_s, 2), "cp s": round(cp, 3), "cp+fsync s": round(cp_sync, 3),
                       "time / cp": round(seconds / cp, 1), "(time - start-up) / cp": round(max(seconds - start_s, 0) / cp, 1),
                       "(time - start-up) / (cp+fsync)": round(max(seconds - start_s, 0) / cp_sync, 1),
                       "peak RSS MB": round(peak / 1e6), "peak / file": round(peak / file_bytes, 2)}
                row.update({f"{k} s (in-process)": v for k, v in report.get("seconds", {}).items()})
                rows.append(row)
                if log:
                    print(json.dumps(row), flush=True)
        return {"size": size, "check": check, "repeats": repeats, "rows": rows}


def summary(result: dict) -> list[str]:
    """Markdown table rows: the worst row of a size, and each row's figures, against the goals
    (--no-check: at most 3x cp plus start-up, and at most 2.2x the file's size in memory)."""
    rows = result["rows"]
    worst_time = max(rows, key=lambda r: r["(time - start-up) / cp"])
    worst_sync = max(rows, key=lambda r: r["(time - start-up) / (cp+fsync)"])
    worst_mem = max(rows, key=lambda r: r["peak / file"])
    what = (f"{result['size']} checkpoint ({worst_mem['file MB']} MB), {'with check' if result['check'] else '--no-check'}, {len(rows)} conversions, "
            f"median of {result.get('repeats', 1)}")
    met = lambda ok: "(met)" if ok else "(MISSED)"  # noqa: E731
    return [
        f"| rnnx convert, {what}: worst (time - start-up) / cp, {worst_time['source']} -> {worst_time['target']} | {worst_time['(time - start-up) / cp']}x "
        f"({worst_time['seconds']} s, start-up {worst_time['start-up s']} s, cp {worst_time['cp s']} s) | <= 3x {met(worst_time['(time - start-up) / cp'] <= 3)} |",
        f"| the same against cp + fsync (rnnx syncs what it writes), worst {worst_sync['source']} -> {worst_sync['target']} | {worst_sync['(time - start-up) / (cp+fsync)']}x | |",
        f"| rnnx convert, {what}: worst peak memory / file, {worst_mem['source']} -> {worst_mem['target']} | {worst_mem['peak / file']}x "
        f"({worst_mem['peak RSS MB']} MB) | <= 2.2x {met(worst_mem['peak / file'] <= 2.2)} |",
    ]


def detail(result: dict) -> list[str]:
    head = ["| source | target | seconds | start-up s | cp s | cp+fsync s | (time - start-up) / cp | peak RSS MB | peak / file |", "|---|---|---|---|---|---|---|---|---|"]
    return head + [f"| {r['source']} | {r['target']} | {r['seconds']} | {r['start-up s']} | {r['cp s']} | {r['cp+fsync s']} | {r['(time - start-up) / cp']}x | "
                   f"{r['peak RSS MB']} | {r['peak / file']}x |" for r in result["rows"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", action="append", choices=[s for s in SIZES if s != "tiny"])
    parser.add_argument("--check", action="store_true", help="run the conversions with their check (default --no-check)")
    parser.add_argument("--source", action="append", choices=SOURCES)
    parser.add_argument("--target", action="append", choices=list(TARGETS))
    args = parser.parse_args()
    for size in args.size or ["370M"]:
        result = measure(size, args.check, tuple(args.source or SOURCES), tuple(args.target or TARGETS))
        print("\n".join(summary(result) + [""] + detail(result)))


if __name__ == "__main__":
    main()
