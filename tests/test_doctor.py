from __future__ import annotations

import json
import subprocess
import sys


def test_doctor_reports_versions_and_skips_the_gpu_check_without_a_gpu() -> None:
    out = subprocess.run([sys.executable, "-m", "rnnx.cli", "doctor", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    env = report["environment"]
    assert env["onnx"] and env["numpy"] and "CPUExecutionProvider" in env["onnxruntime_providers"]
    rows = report["cudnn_layout"]["specs"]
    assert len(rows) >= 7
    if env["gpu"] is None:
        assert report["cudnn_layout"]["passed"] is None
        assert all(r["verdict"] == "not checked" and "no CUDA GPU" in r["why"] for r in rows.values())
    else:  # on a GPU machine the check must have run and passed
        assert report["cudnn_layout"]["passed"] and all(r["verdict"] == "identical" for r in rows.values())


def test_doctor_text_says_once_why_nothing_was_checked() -> None:
    from rnnx.engines import doctor

    check = {"specs": {t: {"verdict": "not checked", "why": "no CUDA GPU visible to torch"} for t in ("lstm,input=1,hidden=2", "gru,input=1,hidden=2")},
             "passed": None}
    text = doctor.as_text({"python": "3.11", "gpu": None, "onnxruntime_providers": ["CPUExecutionProvider"]}, check)
    layout = [line for line in text.splitlines() if line.startswith("cuDNN layout")]
    assert layout == ["cuDNN layout: not checked (no CUDA GPU visible to torch; 2 specs wait for a GPU: run rnnx doctor where one is)"]
