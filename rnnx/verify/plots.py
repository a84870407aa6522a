"""Plots of a verify report (matplotlib, no display) and a self-contained HTML page."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

from rnnx.errors import RNNXError
from rnnx.fileio import atomic_output
from rnnx.verify.model_report import WholeModelReport
from rnnx.verify.stack_report import VerifyReport

_MISSING = "plots need matplotlib, which is not installed: pip install 'rnnx[plots]'"


def require_plots(flag: str) -> None:
    """Refuse ``flag`` in one line where matplotlib is missing, before anything runs."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise RNNXError(f"{flag}: {_MISSING}, or leave {flag} out") from None


def _pyplot() -> Any:
    try:  # no backend is forced: headless machines get Agg by themselves, notebooks keep inline
        import matplotlib.pyplot as plt
    except ImportError:
        raise RNNXError(_MISSING) from None
    return plt


def _per_step(lines: list[tuple[list[float], str, str]], title: str, legend_size: int, floors: list[float] | tuple[()] = ()) -> Any:
    """Max abs error against the float64 reference at each step: one line per (errors, style,
    label), and a dotted line at each tolerance in ``floors``."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for errors, style, label in lines:
        ax.semilogy(range(len(errors)), [max(e, 1e-12) for e in errors], style, label=label)
    for atol in floors:
        ax.axhline(atol, color="grey", linewidth=0.5, linestyle=":")
    ax.set_xlabel("time step")
    ax.set_ylabel("max |error| vs float64 reference")
    ax.set_title(title)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    return fig


def error_over_time(report: VerifyReport) -> Any:
    """Max abs error of Y against the reference at each step, per backend, at the longest run."""
    rows = [r for r in report.rows if r.output == "Y" and r.against == "reference" and r.per_step]
    longest = max((r.seq_len for r in rows), default=0)
    worst = [max((r for r in rows if r.backend == backend and r.seq_len == longest), key=lambda r: r.max_abs)
             for backend in dict.fromkeys(r.backend for r in rows)]
    return _per_step([(w.per_step, "-", f"{w.backend} (B={w.batch}, {w.dtype})") for w in worst], f"Error along the sequence: {report.spec}", 8,
                     [w.atol for w in worst])


def diagnosis_heatmap(report: VerifyReport, backend: str) -> Any:
    """Error of each layout hypothesis against the backend's output, per time step: the row
    that goes dark is the mistake that reproduces what the backend computed."""
    import numpy as np

    plt = _pyplot()
    entry = next(d for d in report.diagnosis if d["backend"] == backend)
    hyps = entry["hypotheses"][:12]
    data = np.array([[max(e, 1e-12) for e in h["per_step"]] for h in hyps])
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(hyps) + 1.5))
    image = ax.imshow(np.log10(data), aspect="auto", cmap="viridis")
    ax.set_yticks(range(len(hyps)), [h["name"] for h in hyps], fontsize=7)
    ax.set_xlabel("time step")
    ax.set_title(f"{backend}: log10 error of each layout hypothesis")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    return fig


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    _pyplot().close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def layer_errors(report: WholeModelReport) -> Any:
    """A whole model's recurrent layers: each one's max abs error of Y against the float64
    reference at each step, at its worst case (the layer that drifts stands out)."""
    return _per_step([(la.per_step, "-" if la.status == "ok" else "--", f"{la.name} ({la.truth}){'' if la.status == 'ok' else ': ' + la.status.upper()}")
                      for la in report.layers if la.per_step], "Each recurrent layer on the inputs it received", 7)


def write_html(report: VerifyReport | WholeModelReport, path: Path) -> None:
    """A self-contained page: the report's text and its plots (a stack's error along the
    sequence and diagnoses; a whole model's error per layer along the sequence)."""
    if isinstance(report, WholeModelReport):
        figures = [("Error along the sequence, per layer", _png(layer_errors(report)))] if any(la.per_step for la in report.layers) else []
    else:
        figures = [("Error along the sequence", _png(error_over_time(report)))]
        for d in report.diagnosis:
            figures.append((f"Diagnosis: {d['backend']}", _png(diagnosis_heatmap(report, d["backend"]))))
    body = [f"<h1>rnnx verify: {'PASS' if report.passed else 'FAIL'}</h1>", f"<pre>{html.escape(str(report))}</pre>"]
    body += [f"<h2>{html.escape(title)}</h2><img alt='{html.escape(title)}' src='data:image/png;base64,{data}'>" for title, data in figures]
    page = "<!doctype html><meta charset='utf-8'><title>rnnx verify</title><body style='font-family:sans-serif'>" + "".join(body) + "</body>"
    with atomic_output(path) as tmp:
        tmp.write_text(page)
