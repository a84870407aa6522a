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
