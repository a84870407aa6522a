"""One check harness: cases run by runners, judged against truths, collected in a report.

- :mod:`rnnx.check.case`: a :class:`Case` (name, sizes, shapes, feeds, rows, chunks), every verb's;
- :mod:`rnnx.check.truths`: what a run is held to (the float64 reference, torch in float32 and
  float64 with its fallback, ONNX's reference evaluator);
- :mod:`rnnx.check.runners`: every runner, from one registry, each closed when done, untrusted
  files isolated;
- :mod:`rnnx.check.judge`: ``judge(got, truth, rule) -> Row``, the calibrated-or-fixed decision;
- :mod:`rnnx.check.report`: a :class:`Report` (``passed``, ``first_failure``, ``to_json``, ``dump``),
  where nothing passes unchecked.
- :mod:`rnnx.check.stack`: a stack's check (a runner on seeded inputs at a few shapes against the
  float64 reference): convert's, and every runner test's.
"""

from rnnx.check.case import Case
from rnnx.check.judge import Row, Rule, judge, judge_outputs, worst_failure
from rnnx.check.report import Report, Verdict

__all__ = ["Case", "Report", "Row", "Rule", "Verdict", "judge", "judge_outputs", "worst_failure"]
