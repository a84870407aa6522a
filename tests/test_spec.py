from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from rnnx import RNNSpec, RNNXError


@st.composite
def specs(draw: st.DrawFn) -> RNNSpec:
    cell = draw(st.sampled_from(["lstm", "gru", "rnn_tanh", "rnn_relu"]))
    hidden = draw(st.integers(1, 9))
    return RNNSpec(
        cell=cell,
        input_size=draw(st.integers(1, 9)),
        hidden_size=hidden,
        num_layers=draw(st.integers(1, 3)),
        direction=draw(st.sampled_from(["forward", "reverse", "bidirectional"])),
        bias=draw(st.booleans()),
        proj_size=draw(st.integers(0, hidden - 1)) if cell == "lstm" else 0,
        peepholes=draw(st.booleans()) if cell == "lstm" else False,
        reset_after=draw(st.booleans()) if cell == "gru" else True,
    )


def test_parse_the_issue_example() -> None:
    spec = RNNSpec.parse("lstm,input=8,hidden=16,layers=2,bidirectional,proj=4")
    assert (spec.cell, spec.input_size, spec.hidden_size, spec.num_layers) == ("lstm", 8, 16, 2)
    assert spec.direction == "bidirectional" and spec.proj_size == 4 and spec.output_size == 4
    assert spec.layer_input_size(0) == 8 and spec.layer_input_size(1) == 8
    assert str(spec) == "lstm,input=8,hidden=16,layers=2,bidirectional,proj=4"


@given(specs())
def test_string_round_trip(spec: RNNSpec) -> None:
    assert RNNSpec.parse(str(spec)) == spec


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("lstm,hidden=3", "missing input"),
        ("lstm,input=3,hidden=x", "expects an integer"),
        ("cnn,input=3,hidden=3", "cell kind"),
        ("gru,input=3,hidden=3,proj=1", "only LSTMs have a projection"),
        ("lstm,input=3,hidden=3,proj=3", "expected less than hidden=3"),
        ("rnn_tanh,input=3,hidden=3,peepholes", "only LSTMs have peepholes"),
        ("lstm,input=3,hidden=3,reset_before", "only GRUs"),
        ("lstm,input=3,hidden=3,sideways", "unknown token 'sideways'"),
        ("lstm,input=0,hidden=3", "positive integer"),
    ],
)
def test_bad_specs_say_what_is_wrong(text: str, fragment: str) -> None:
    with pytest.raises(RNNXError, match=fragment):
        RNNSpec.parse(text)


@pytest.mark.parametrize("text, fragment", [
    ("lstm,input=1,hidden=2,layers=1000000000", "num_layers: expected at most 4096"),
    ("gru,input=1000000,hidden=1000000", "more than 17,179,869,184 parameters"),
])
def test_absurd_specs_are_refused_before_anything_is_allocated(text: str, fragment: str) -> None:
    """Specs come from untrusted text and file metadata; tables and buffers are sized from them."""
    with pytest.raises(RNNXError, match=fragment):
        RNNSpec.parse(text)
    RNNSpec.parse("lstm,input=2048,hidden=2048,layers=4,bidirectional")  # 1.5 GB of weights is a real model
