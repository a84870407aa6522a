"""The library's refusals name its parameters (``pass select=GROUP``); a CLI user reads the
flag that sets each one (``pass --select GROUP``)."""

from __future__ import annotations

import re

# Parameter of the Python API -> the option that sets it, where a verb has one.
FLAGS = {
    "against": "--against",
    "atol": "--atol",
    "backend_tolerances": "--tol",
    "backends": "--backends",
    "batch_first": "--batch-first",
    "batches": "--batch",
    "check_error_stat": "--check-error-stat",
    "checkpoint": "--checkpoint",
    "dims": "--dim",
    "dtype": "--dtype",
    "dtypes": "--dtype",
    "from_format": "--from",
    "hardware_compatible": "--hardware-compatible",
    "input_map": "--input-map",
    "input_shapes": "--input",
    "jetpack": "--jetpack",
    "max_memory": "--max-memory",
    "max_shapes": "--max-shapes",
    "min_shapes": "--min-shapes",
    "nondeterministic_atol": "--nondeterministic-atol",
    "nonfinite": "--nonfinite",
    "opset": "--opset",
    "opt_shapes": "--opt-shapes",
    "precision": "--precision",
    "rtol": "--rtol",
    "profiles": "--profile",
    "quantize": "--quantize",
    "select": "--select",
    "seq_lens": "--seq-lens",
    "spec": "--spec",
    "states": "--no-states",
    "tensorrt": "--tensorrt",
    "time_limit": "--time-limit",
    "to_format": "--to",
    "version_compatible": "--version-compatible",
}
# Where one parameter name is set by a different option in one verb.
VERB_FLAGS = {
    "convert": {"seq_lens": "--seq-lens-input"},  # convert(seq_lens=True) is the switch; verify's seq_lens are lengths
    "lower": {"select": "--node", "tensorrt": "--for"},  # lower_file(select=) names a node
}

# ``name=`` at a word's start: not ``input=8`` inside a spec (after a comma) nor ``a.b=``.
_PARAMETER = re.compile(r"(?<![\w.,/=:'\"-])([a-z][a-z_]*)=(True\b|False\b)?")
_LEADING = re.compile(r"([a-z][a-z_]*):")
_VALUE_ENDS = ("", " ", ";", ",", ")", ".")


def for_verb(verb: str | None) -> dict[str, str]:
    """The parameter-to-flag table of ``verb``."""
    return {**FLAGS, **VERB_FLAGS.get(verb or "", {})}


def flagged(message: str, verb: str | None) -> str:
    """``message`` with each parameter it names as the flag of ``verb`` that sets it."""
    flags = for_verb(verb)

    def swap(match: re.Match[str]) -> str:
        flag = flags.get(match.group(1))
        if flag is None:
            return match.group(0)
        if match.group(2) is not None:  # a switch: `version_compatible=True` is `--version-compatible`
            return flag
        follows = message[match.end():match.end() + 1]
        return flag if follows in _VALUE_ENDS else flag + " "

    text = _PARAMETER.sub(swap, message)
    leading = _LEADING.match(text)
    if leading and leading.group(1) in flags:  # "opset: expected 14 to 23, found 99"
        text = flags[leading.group(1)] + text[leading.end() - 1:]
    return text
