"""A library's message quoted into one of rnnx's lines: one line, no control characters, cut
at a word, as long as the quote's purpose allows (rnnx.errors.one_line)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rnnx.errors import CAUSE_CHARS, DETAIL_CHARS, NOTE_CHARS, RNNXError, one_line

_ROOT = Path(__file__).resolve().parents[1]


def test_a_multi_line_message_with_control_characters_becomes_one_plain_line() -> None:
    exc = ValueError("first line\n\tsecond\r\nthird \x1b[1;31mred\x1b[0m bell\x07 nul\x00 del\x7f\x0bend")
    line = one_line(exc, CAUSE_CHARS)
    assert line == "first line second third red bell\\x07 nul\\x00 del\\x7f end"
    assert line.isprintable() and "\n" not in line and "\x1b" not in line


def test_a_long_message_is_cut_at_a_word_within_its_limit() -> None:
    words = " ".join(f"word{k}," for k in range(200))
    for limit in (NOTE_CHARS, DETAIL_CHARS, CAUSE_CHARS):
        line = one_line(RuntimeError(words), limit)
        assert line.endswith("...") and len(line) <= limit + 3
        assert line[:-3].rstrip(",").split(" ")[-1].startswith("word")  # a whole word before the ellipsis, no trailing comma
        assert words.startswith(line[:-3])
    token = "x" * 1000  # no word to cut at: cut at the limit
    assert one_line(token, 50) == "x" * 50 + "..."
    assert one_line(words, None) == words and one_line("short", 300) == "short"


def test_the_class_is_named_when_asked_or_when_the_message_is_empty() -> None:
    assert one_line(KeyError(), 300) == "KeyError"
    assert one_line(ValueError("bad\nthing"), 300, typed=True) == "ValueError: bad thing"
    assert one_line(ValueError(""), 300, typed=True) == "ValueError"
    assert one_line("", 300) == ""  # text, not an exception: nothing to name


def test_the_limits_keep_their_order() -> None:
    assert NOTE_CHARS < DETAIL_CHARS < CAUSE_CHARS


def test_onnx_runtime_s_multi_line_refusal_reaches_the_user_as_one_line(tmp_path: Path) -> None:
    """ONNX Runtime's own message for a run at a rank the file does not take spans lines; the
    runner's refusal is one line."""
    from onnx import TensorProto, helper

    from rnnx.engines.onnxruntime import OnnxRuntimeRunner

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    runner = OnnxRuntimeRunner(model)
    assert runner({"x": np.ones((2, 3), np.float32)})["y"].shape == (2, 3)
    with pytest.raises(RNNXError) as caught:
        runner({"x": np.ones((2, 3, 4), np.float32)})
    message = str(caught.value)
    assert message.startswith("ONNX Runtime could not run the model: ") and message.isprintable()
    assert len(message) <= len("ONNX Runtime could not run the model: ") + CAUSE_CHARS + 3


def test_no_copy_of_the_one_line_idiom_comes_back() -> None:
    """The idiom is written once, in rnnx.errors.one_line: a copy elsewhere drifts in its limit
    and lets control characters through."""
    copies = [f"{path.relative_to(_ROOT)}:{k}" for path in sorted((_ROOT / "rnnx").rglob("*.py")) if path.name != "errors.py"
              for k, line in enumerate(path.read_text().splitlines(), 1) if "split())[:" in line or "split()))[:" in line]
    assert not copies, f"use rnnx.errors.one_line instead of ' '.join(...split())[:N] at {copies}"
