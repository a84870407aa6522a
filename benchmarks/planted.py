"""The planted-mistake campaign: every check rnnx runs must catch every layout mistake, and no
honest case may fail.

Run:  .venv/bin/python benchmarks/planted.py [--quick] [--json out.json]
Writes benchmarks/planted_results.md and benchmarks/planted_results.json (or --json's path).

Checks (each held to the calibrated rule: max abs error within 16x the rounding floor):
- export: ``rnnx.export`` (its ONNX Runtime self-check against torch, then its layer check);
- verify --against: ``rnnx verify FILE --against model.py:NAME`` (``verify_loaded``);
- convert: ``rnnx convert SOURCE.pt -o OUT.onnx`` (stack alone);
- verify (stack): ``rnnx verify SOURCE.pt MODEL.onnx`` (stack alone);
- fuse/lower: the check ``rnnx fuse`` and ``rnnx lower`` run (``compare_models``).

Mistakes (tests/checks/planting.py plants them, one layer and one direction each): (a) two
gates swapped, (b) R of one gate transposed, (c) one bias dropped, (d) directions swapped,
(e) a GRU's reset mode flipped, (f) a 1% scale on one gate's W rows; in the last layer's last
direction, and in layer 0 too for (a) and (d). Margin = the largest ratio the check reported
(max abs error / rounding floor) / 16: above 1 the check fails.

Honest cases: the same checks with no mistake, seeded, weights at PyTorch's init scale and
1.5x, batch 1 included, lengths 1 to 200; none may fail. Their largest ratio is reported
(16 / it = the room left below the multiple).

The full run plants every mistake in 11 families at two seeds (init scale, then 1.5x) and
runs ~400 honest checks; --quick plants in 2 families (a stack, a whole model) once and runs a few dozen honest checks.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
warnings.simplefilter("ignore")

import onnx  # noqa: E402
import onnxruntime  # noqa: E402
import torch  # noqa: E402

from tests.checks import planting as P  # noqa: E402

CHECKS = ("export", "verify --against", "convert", "verify (stack)", "fuse/lower")
MD = ROOT / "benchmarks" / "planted_results.md"
JSON = ROOT / "benchmarks" / "planted_results.json"

FULL = {
    "planted_families": list(P.FAMILIES),
    "planted_variants": [(0, 1.0), (1, 1.5)],  # (seed, weight scale)
    # (seed, scale, T, B) of each honest export; each file is then verified --against and lowered
    "honest_exports": [(10, 1.0, 1, 1), (11, 1.5, 7, 3), (12, 1.0, 60, 1), (13, 1.5, 200, 2)],
    "honest_export_families": list(P.FAMILIES),
    "verify_seq_lens": [1, 17, 200], "verify_batches": [1, 4],
    # convert: seeds x scales x (seq_lens input, batch_first) per stack family
    "convert_seeds": list(range(20, 26)), "convert_scales": [1.0, 1.5], "convert_forms": [(False, False), (True, False), (False, True), (True, True)],
    # stack-alone verify: (seed, scale) per stack family, at verify_seq_lens x verify_batches
    "stack_verifies": [(30, 1.0), (31, 1.5), (32, 1.0), (33, 1.5)],
    # the probe: a scale too small for the outputs of a whole model to show, in the same place as (f)
    "probe_families": ["ctc", "tagger", "mean_classifier", "softmax_head", "forecaster"], "probe_factor": 1.0002,
}
QUICK = {
    "planted_families": ["lstm2bi", "tagger"],
    "planted_variants": [(0, 1.0)],
    "honest_exports": [(10, 1.0, 1, 1), (13, 1.5, 200, 2)],
    "honest_export_families": ["ctc", "forecaster"],
    "verify_seq_lens": [1, 17, 200], "verify_batches": [1, 4],
    "convert_seeds": [20], "convert_scales": [1.0, 1.5], "convert_forms": [(False, False), (True, True)],
    "stack_verifies": [(31, 1.5)],
    "probe_families": [], "probe_factor": 1.0002,
}


def log(text: str) -> None:
    print(text, flush=True)


def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


# --- running -----------------------------------------------------------------------------


def planted_campaign(config: dict[str, Any], folder: Path, out: list[P.Outcome], skipped: list[dict[str, str]]) -> None:
    for name in config["planted_families"]:
        family = P.FAMILIES[name]
        mistakes, why_not = P.plan_mistakes(family)
        skipped += [{"family": name, "mistake": kind, "why": why} for kind, why in why_not]
        for seed, scale in config["planted_variants"]:
            honest, model, good = P.run_export(family, folder, seed=seed, scale=scale, keep=True)
            out.append(honest)
            if good is None:
                log(f"  {name}: the honest export failed ({honest.detail}); nothing planted at seed {seed}")
                continue
            original = onnx.load(str(good))
            source = converted = None
            if family.kind == "stack":
                source = P.write_source(family, model, folder, f"s{seed}")
                converted = folder / f"{name}-s{seed}-converted.onnx"
                out.append(P.guarded("convert", family, "honest", "honest", lambda: P.run_convert(family, source, converted, seed=seed, scale=scale),
                                     seed, scale))
            for m in mistakes:
                row: list[P.Outcome] = []
                row.append(P.guarded("export", family, m.label, m.kind, lambda: P.run_export(family, folder, m, seed=seed, scale=scale)[0], seed, scale))
                try:
                    bad, how = P.planted_export_file(family, model, good, m, folder / "planted-writer.onnx", seed=seed)
                except Exception as exc:  # noqa: BLE001  a planting that could not be made is reported, not fatal
                    log(f"  {name}: could not plant {m.label} in the exported file: {type(exc).__name__}: {exc}")
                    skipped.append({"family": name, "mistake": m.label, "why": f"planting failed: {type(exc).__name__}: {exc}"})
                    out.extend(row)
                    continue
                path = P.save(bad, folder / f"{name}-planted.onnx")
                row.append(P.guarded("verify --against", family, m.label, m.kind,
                                     lambda: P.run_verify_against(family, model, path, m.label, m.kind, how, seed=seed, scale=scale), seed, scale))
                row.append(P.guarded("fuse/lower", family, m.label, m.kind,
                                     lambda: P.run_rewrite(family, original, bad, m.label, m.kind, how, seed=seed, scale=scale), seed, scale))
                if source is not None and converted is not None and converted.exists():
                    row.append(P.guarded("convert", family, m.label, m.kind,
                                         lambda: P.run_convert(family, source, folder / f"{name}-planted-convert.onnx", m, seed=seed, scale=scale),
                                         seed, scale))
                    bad_c, how_c = P.planted_convert_file(family, source, converted, m, folder / "planted-convert-writer.onnx")
                    path_c = P.save(bad_c, folder / f"{name}-planted-converted.onnx")
                    row.append(P.guarded("verify (stack)", family, m.label, m.kind,
                                         lambda: P.run_verify_stack(family, source, path_c, m.label, m.kind, how_c, seed=seed, scale=scale),
                                         seed, scale))
                for o in row:
                    o.seed, o.scale = seed, scale
                out.extend(row)
                cells = "  ".join(f"{o.check}: {'caught' if o.failed else 'MISSED'} {fmt(o.margin)}" for o in row)
                log(f"  {name:<15} s{seed} x{scale:g}  {m.label:<34} {cells}")
            good.unlink()


def probe_campaign(config: dict[str, Any], folder: Path, out: list[P.Outcome]) -> None:
    """Not a mistake of the list: W x 1.0002 on the gate (f) scales, in whole models. Behind their
    heads the outputs stay within 16 floors; the layer-by-layer checks of export and verify
    --against must still see it (the rewrite check compares outputs only: it is shown, not judged)."""
    for name in config["probe_families"]:
        family = P.FAMILIES[name]
        m = dataclasses.replace(next(m for m in P.plan_mistakes(family)[0] if m.kind == "scale"), factor=config["probe_factor"])
        honest, model, good = P.run_export(family, folder, keep=True)
        if good is None:
            continue
        row = [P.guarded("export", family, m.label, "probe", lambda: P.run_export(family, folder, m)[0])]
        bad, how = P.planted_export_file(family, model, good, m, folder / "probe-writer.onnx")
        path = P.save(bad, folder / f"{name}-probe.onnx")
        row.append(P.guarded("verify --against", family, m.label, "probe", lambda: P.run_verify_against(family, model, path, m.label, "probe", how)))
        row.append(P.guarded("fuse/lower", family, m.label, "probe", lambda: P.run_rewrite(family, onnx.load(str(good)), bad, m.label, "probe", how)))
        for o in row:
            o.kind = "probe"
        out.extend(row)
        good.unlink()
        log(f"  probe {name:<15} {m.label:<28} " + "  ".join(
            f"{o.check}: {'failed' if o.failed else 'passed'} (outputs {fmt(o.output_ratio)}, layers {fmt(o.layer_ratio)})" for o in row))


def honest_campaign(config: dict[str, Any], folder: Path, out: list[P.Outcome]) -> None:
    lens, batches = config["verify_seq_lens"], config["verify_batches"]
    for name in config["honest_export_families"]:
        family = P.FAMILIES[name]
        for seed, scale, T, B in config["honest_exports"]:
            o, model, good = P.run_export(family, folder, seed=seed, scale=scale, T=T, B=B, keep=True)
            out.append(o)
            line = [f"export {fmt(o.ratio)}" + ("" if not o.failed else " FAILED")]
            if good is not None:
                v = P.guarded("verify --against", family, "honest", "honest",
                              lambda: P.run_verify_against(family, model, good, seq_lens=lens, batches=batches, seed=seed, scale=scale), seed, scale)
                out.append(v)
                line.append(f"verify {fmt(v.ratio)}" + ("" if not v.failed else " FAILED"))
                original = onnx.load(str(good))
                low = P.lowered(original)
                if low is not None:
                    r = P.guarded("fuse/lower", family, "honest", "honest", lambda: P.run_rewrite(family, original, low, seed=seed, scale=scale), seed, scale)
                    out.append(r)
                    line.append(f"lower {fmt(r.ratio)}" + ("" if not r.failed else " FAILED"))
                good.unlink()
            log(f"  honest {name:<15} s{seed} x{scale:g} T={T:<3} B={B}: " + ", ".join(line))
    for name in P.STACKS:
        family = P.FAMILIES[name]
        ratios = []
        for seed in config["convert_seeds"]:
            for scale in config["convert_scales"]:
                model = family.make(seed, scale)
                source = P.write_source(family, model, folder, f"honest-s{seed}-x{scale:g}")
                for seq_lens, batch_first in config["convert_forms"]:
                    target = folder / f"{name}-honest.onnx"
                    o = P.guarded("convert", family, "honest", "honest",
                                  lambda: P.run_convert(family, source, target, seq_lens=seq_lens, batch_first=batch_first, seed=seed, scale=scale),
                                  seed, scale)
                    o.detail += f" (seq_lens input {seq_lens}, batch_first {batch_first})"
                    out.append(o)
                    ratios.append(o.ratio or 0.0)
                    if target.exists():
                        target.unlink()
        log(f"  honest convert {name:<15} {len(ratios)} runs, largest ratio {fmt(max(ratios, default=None))}")
        for seed, scale in config["stack_verifies"]:
            model = family.make(seed, scale)
            source = P.write_source(family, model, folder, f"vs-s{seed}")
            target = folder / f"{name}-vs.onnx"
            c = P.guarded("convert", family, "honest", "honest", lambda: P.run_convert(family, source, target, seed=seed, scale=scale), seed, scale)
            out.append(c)
            if target.exists():
                v = P.guarded("verify (stack)", family, "honest", "honest",
                              lambda: P.run_verify_stack(family, source, target, seq_lens=lens, batches=batches, seed=seed, scale=scale), seed, scale)
                out.append(v)
                log(f"  honest verify (stack) {name:<15} s{seed} x{scale:g}: {fmt(v.ratio)}" + (" FAILED" if v.failed else ""))
                target.unlink()


# --- reporting ---------------------------------------------------------------------------


def summarize(outcomes: list[P.Outcome]) -> dict[str, Any]:
    planted = [o for o in outcomes if o.kind in P.KINDS]
    honest = [o for o in outcomes if o.kind == "honest"]

    def smallest(group: list[P.Outcome]) -> P.Outcome | None:
        caught = [o for o in group if o.failed and o.margin is not None]
        return min(caught, key=lambda o: o.margin or 0.0, default=None)

    def entry(group: list[P.Outcome]) -> dict[str, Any]:
        s = smallest(group)
        return {"planted": len(group), "caught": sum(o.failed for o in group), "missed": sum(not o.failed for o in group),
                "smallest_margin": None if s is None else s.margin, "where": None if s is None else _where(s),
                "caught_by": None if s is None else s.caught_by}

    by_kind = {k: entry([o for o in planted if o.kind == k]) for k in P.KINDS if any(o.kind == k for o in planted)}
    by_check = {c: entry([o for o in planted if o.check == c]) for c in CHECKS if any(o.check == c for o in planted)}
    cross = {k: {c: (lambda s: None if s is None else s.margin)(smallest([o for o in planted if o.kind == k and o.check == c])) for c in CHECKS}
             for k in P.KINDS}
    honest_by_check = {}
    for c in CHECKS:
        group = [o for o in honest if o.check == c]
        if not group:
            continue
        worst = max(group, key=lambda o: o.ratio if o.ratio is not None else -1.0)
        honest_by_check[c] = {"runs": len(group), "comparisons": sum(o.cases for o in group), "failures": sum(o.failed for o in group),
                              "largest_ratio": worst.ratio, "room": None if not worst.ratio else P.MULTIPLE / worst.ratio, "where": _where(worst),
                              "seconds": sum(o.seconds for o in group)}
    return {"planted": len(planted), "caught": sum(o.failed for o in planted), "missed": [o.to_json() for o in planted if not o.failed],
            "errors": [o.to_json() for o in outcomes if o.error],
            "honest_runs": len(honest), "honest_failures": [o.to_json() for o in honest if o.failed],
            "by_kind": by_kind, "by_check": by_check, "cross": cross, "honest": honest_by_check,
            "seconds_by_check": {c: sum(o.seconds for o in outcomes if o.check == c) for c in CHECKS}}


def _where(o: P.Outcome) -> str:
    return f"{o.check}, {o.family}, {o.mistake if o.kind != 'honest' else 'honest'}, seed {o.seed}, x{o.scale:g}"


def markdown(summary: dict[str, Any], outcomes: list[P.Outcome], skipped: list[dict[str, str]], meta: dict[str, Any]) -> str:
    lines = [f"# Planted-mistake campaign ({meta['mode']})", "",
             f"`{meta['command']}`, {meta['date']}; {meta['machine']}; torch {meta['torch']}, onnxruntime {meta['onnxruntime']}, "
             f"onnx {meta['onnx']}; wall time {meta['wall_seconds']:.0f} s.", "",
             f"Every check holds outputs to the calibrated rule: max abs error within {P.MULTIPLE:g}x the rounding floor. "
             f"**Margin** = the largest ratio (max abs error / floor) the check reported, divided by {P.MULTIPLE:g}: a planted "
             "mistake is caught when the check fails (margin > 1). Honest runs: the largest ratio any honest case reached, and "
             f"**room** = {P.MULTIPLE:g} / that ratio.", "",
             f"- planted (check x family x mistake x seed): **{summary['planted']}**, caught **{summary['caught']}**, "
             f"missed **{len(summary['missed'])}**",
             f"- honest check runs: **{summary['honest_runs']}** ({sum(h['comparisons'] for h in summary['honest'].values())} comparisons), "
             f"failed **{len(summary['honest_failures'])}**",
             f"- checks that raised instead of reporting: **{len(summary['errors'])}**", ""]
    lines += ["## Smallest margin per mistake kind", "", "| mistake | planted | caught | smallest margin | where | caught by |", "|---|---:|---:|---:|---|---|"]
    for kind, e in summary["by_kind"].items():
        letter, what = P.KINDS[kind]
        lines.append(f"| ({letter}) {what} | {e['planted']} | {e['caught']} | {fmt(e['smallest_margin'])} | {e['where'] or '-'} | {e['caught_by'] or '-'} |")
    lines += ["", "## Smallest margin per check", "", "| check | planted | caught | smallest margin | where | caught by |", "|---|---:|---:|---:|---|---|"]
    for check, e in summary["by_check"].items():
        lines.append(f"| {check} | {e['planted']} | {e['caught']} | {fmt(e['smallest_margin'])} | {e['where'] or '-'} | {e['caught_by'] or '-'} |")
    lines += ["", "## Smallest margin, mistake x check", "", "| mistake | " + " | ".join(CHECKS) + " |", "|---|" + "---:|" * len(CHECKS)]
    for kind, row in summary["cross"].items():
        if kind in summary["by_kind"]:
            lines.append(f"| ({P.KINDS[kind][0]}) {kind} | " + " | ".join(fmt(row[c]) for c in CHECKS) + " |")
    lines += ["", "## Honest runs: the largest ratio per check", "",
              "| check | runs | comparisons | failures | largest ratio | room below 16 | where | seconds |", "|---|---:|---:|---:|---:|---:|---|---:|"]
    for check, h in summary["honest"].items():
        lines.append(f"| {check} | {h['runs']} | {h['comparisons']} | {h['failures']} | {fmt(h['largest_ratio'])} | {fmt(h['room'])} | {h['where']} | {h['seconds']:.0f} |")
    if summary["missed"] or summary["honest_failures"] or summary["errors"]:
        lines += ["", "## Missed mistakes, honest failures, errors", ""]
        for title, items in (("missed", summary["missed"]), ("honest failure", summary["honest_failures"]), ("raised", summary["errors"])):
            for o in items:
                lines.append(f"- {title}: {o['check']}, {o['family']}, {o['mistake']} (seed {o['seed']}, x{o['scale']:g}): "
                             f"largest ratio {fmt(o['ratio'])}; {o['detail']}")
    lines += ["", "## Every planted mistake", "",
              "Each cell: the smallest margin over the seeds planted (caught/planted where not all were caught; "
              "`L` where the outputs passed and the layer-by-layer check caught it; `-`: the check does not apply).", "",
              "| family | mistake | how | " + " | ".join(CHECKS) + " |", "|---|---|---|" + "---:|" * len(CHECKS)]
    groups: dict[tuple[str, str], list[P.Outcome]] = defaultdict(list)
    for o in outcomes:
        if o.kind in P.KINDS:
            groups[(o.family, o.mistake)].append(o)
    for (family, mistake), group in groups.items():
        cells = []
        for check in CHECKS:
            g = [o for o in group if o.check == check]
            if not g:
                cells.append("-")
                continue
            caught = [o for o in g if o.failed]
            low = min((o.margin for o in caught if o.margin is not None), default=None)
            cell = fmt(low) + ("L" if any(o.caught_by == "layers" for o in caught) else "")
            if len(caught) < len(g):
                cell = f"**MISSED** {len(caught)}/{len(g)} (ratio {fmt(max((o.ratio or 0) for o in g if not o.failed))})"
            if any(o.error for o in g):
                cell += " (raised)"
            cells.append(cell)
        hows = sorted({o.how for o in group if o.how})
        lines.append(f"| {family} | {mistake} | {'/'.join(hows)} | " + " | ".join(cells) + " |")
    lines += ["", "`how`: `writer` = rnnx's writer patched (export, convert; a projected LSTM's Scans in every check); `file` = a correct "
              "file's native node mutated with onnx + numpy (verify --against, verify (stack), fuse/lower)."]
    probes = [o for o in outcomes if o.kind == "probe"]
    if probes:
        lines += ["", "## Probe: a mistake below the outputs' view", "",
                  f"Not one of the mistakes above: W x {meta['config']['probe_factor']:g} on the gate (f) scales, in whole models "
                  "(seed 0, init scale). Behind the heads the outputs stay within 16 floors; the layer-by-layer checks of export and "
                  "verify --against see it. The rewrite check of fuse/lower compares outputs only, so it is shown, not judged "
                  "(a rewrite that keeps the outputs within 16 floors passes by design).", "",
                  "| family | mistake | check | result | largest ratio, outputs | largest ratio, layers | caught by |", "|---|---|---|---|---:|---:|---|"]
        for o in probes:
            lines.append(f"| {o.family} | {o.mistake} | {o.check} | {'failed' if o.failed else 'passed'} | {fmt(o.output_ratio)} | "
                         f"{fmt(o.layer_ratio)} | {o.caught_by or '-'} |")
    if skipped:
        lines += ["", "## Not planted", "", "| family | mistake | why |", "|---|---|---|"]
        for s in sorted({(s["family"], s["mistake"], s["why"]) for s in skipped}):
            lines.append(f"| {s[0]} | {s[1]} | {s[2]} |")
    lines += ["", "## Families", "", "| family | kind | description |", "|---|---|---|"]
    for f in P.FAMILIES.values():
        lines.append(f"| {f.name} | {f.kind} | {f.description} |")
    lines += ["", "## Seconds per check (all runs)", "", "| check | seconds |", "|---|---:|"]
    lines += [f"| {c} | {s:.0f} |" for c, s in summary["seconds_by_check"].items()]
    return "\n".join(lines) + "\n"


PLANTED_COLUMNS = ("check", "family", "mistake", "kind", "seed", "scale", "failed", "margin", "ratio", "output_ratio", "layer_ratio", "caught_by",
                   "how", "cases", "seconds", "error", "detail")
HONEST_COLUMNS = ("check", "family", "seed", "scale", "failed", "ratio", "output_ratio", "layer_ratio", "cases", "seconds")


def _rounded(value: Any) -> Any:
    """Floats to 4 significant digits, for a JSON file of readable size."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def results_json(outcomes: list[P.Outcome], summary: dict[str, Any], skipped: list[dict[str, str]], meta: dict[str, Any]) -> str:
    """The summary, then every planted (and probe) outcome as a row of PLANTED_COLUMNS (its detail
    cut to 160 characters) and every honest one as a row of HONEST_COLUMNS, one a line (a
    failure, if any, is in full in the summary)."""
    def row(o: P.Outcome, columns: tuple[str, ...]) -> str:
        values = o.to_json() | {"detail": o.detail[:160]}
        return json.dumps(_rounded([values[c] for c in columns]))

    planted = [row(o, PLANTED_COLUMNS) for o in outcomes if o.kind != "honest"]
    honest = [row(o, HONEST_COLUMNS) for o in outcomes if o.kind == "honest"]
    head = json.dumps({"meta": _rounded(meta), "summary": _rounded(summary), "skipped": skipped})[:-1]
    return (head + ',\n"planted": {"columns": ' + json.dumps(PLANTED_COLUMNS) + ', "rows": [\n' + ",\n".join(planted)
            + '\n]},\n"honest": {"columns": ' + json.dumps(HONEST_COLUMNS) + ', "rows": [\n' + ",\n".join(honest) + "\n]}}\n")


def print_tables(summary: dict[str, Any]) -> None:
    log("\nsmallest margin per mistake kind:")
    for kind, e in summary["by_kind"].items():
        log(f"  ({P.KINDS[kind][0]}) {kind:<16} caught {e['caught']}/{e['planted']}  smallest margin {fmt(e['smallest_margin']):>8}  at {e['where']} [{e['caught_by']}]")
    log("smallest margin per check:")
    for check, e in summary["by_check"].items():
        log(f"  {check:<17} caught {e['caught']}/{e['planted']}  smallest margin {fmt(e['smallest_margin']):>8}  at {e['where']} [{e['caught_by']}]")
    log("mistake x check (smallest margin):")
    log("  " + " " * 18 + "".join(f"{c:>18}" for c in CHECKS))
    for kind, row in summary["cross"].items():
        if kind in summary["by_kind"]:
            log(f"  {kind:<18}" + "".join(f"{fmt(row[c]):>18}" for c in CHECKS))
    log("honest runs, largest ratio per check:")
    for check, h in summary["honest"].items():
        log(f"  {check:<17} {h['runs']:>4} runs, {h['comparisons']:>5} comparisons, {h['failures']} failed, largest ratio {fmt(h['largest_ratio'])} "
            f"(room {fmt(h['room'])}x) at {h['where']}")
    for title, items in (("MISSED", summary["missed"]), ("HONEST FAILURE", summary["honest_failures"]), ("RAISED", summary["errors"])):
        for o in items:
            log(f"{title}: {o['check']}, {o['family']}, {o['mistake']} (seed {o['seed']}, x{o['scale']:g}): ratio {fmt(o['ratio'])}; {o['detail']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small subset (under 3 minutes)")
    parser.add_argument("--json", type=Path, default=JSON, help=f"where to write the results as JSON (default {JSON.relative_to(ROOT)})")
    parser.add_argument("--md", type=Path, default=MD, help=f"where to write the tables (default {MD.relative_to(ROOT)})")
    parser.add_argument("--families", help="comma-separated families to plant in (default: the mode's)")
    args = parser.parse_args(argv)
    config = dict(QUICK if args.quick else FULL)
    if args.families:
        config["planted_families"] = config["honest_export_families"] = args.families.split(",")
    started = time.perf_counter()
    outcomes: list[P.Outcome] = []
    skipped: list[dict[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="rnnx-planted-") as tmp:
        folder = Path(tmp)
        log(f"planted mistakes ({'quick' if args.quick else 'full'}):")
        planted_campaign(config, folder, outcomes, skipped)
        planted_seconds = time.perf_counter() - started
        if config["probe_families"]:
            log("probe (a scale below the outputs' view):")
            probe_campaign(config, folder, outcomes)
        log("honest cases:")
        honest_campaign(config, folder, outcomes)
    wall = time.perf_counter() - started
    summary = summarize(outcomes)
    meta = {"mode": "quick" if args.quick else "full", "command": "python benchmarks/planted.py" + (" --quick" if args.quick else ""),
            "date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_implementation()} {platform.python_version()}",
            "torch": torch.__version__, "onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__, "wall_seconds": wall,
            "planted_seconds": planted_seconds, "honest_seconds": wall - planted_seconds, "multiple": P.MULTIPLE, "config": config}
    print_tables(summary)
    log(f"wall time {wall:.0f} s (planted {planted_seconds:.0f} s, honest {wall - planted_seconds:.0f} s)")
    args.md.write_text(markdown(summary, outcomes, skipped, meta))
    args.json.write_text(results_json(outcomes, summary, skipped, meta))
    log(f"wrote {args.md} and {args.json}")
    return 1 if summary["missed"] or summary["honest_failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
