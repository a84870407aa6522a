"""The verbs agree on which shapes a file accepts and what each dimension is.

verify (its input specs and cases), fuse/lower's check (its shape plan and the first shapes it
tries), rnnx build's TensorRT profile and rnnx bundle's golden cases each ask which shapes and
which roles. On the same files (rnnx's own exports, a streaming export, files torch.onnx
wrote with named and with anonymous dynamic axes, and rnnx's exports of models five other
packages define, imported unmodified: tests/fixtures/third_party) they must give the same role to every
dynamic dimension, ONNX Runtime must run the file at every shape any of them picks, and the
shapes verify checks must lie within the profile an engine is built with by default, so an
engine can run what verify held to the reference. Three of those packages' models refuse
length 1 (a VGG's convolutions, a reflect pad, a sinc filter bank): the profile's min is then
the least length the file runs at, asked of ONNX Runtime.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import rnnx  # noqa: E402
from rnnx.check import Case  # noqa: E402
from rnnx.engines.tensorrt import BuildOptions, plan_build  # noqa: E402
from rnnx.pipelines.bundle_cases import plan_cases as bundle_cases  # noqa: E402
from rnnx.shapes.file_dims import read_file_dims  # noqa: E402
from rnnx.shapes.rewrite_plan import candidates, plan_shapes, shapes_at  # noqa: E402
from rnnx.shapes.roles import BATCH, LENGTH, ROLES  # noqa: E402
from rnnx.streaming import graph_ranks, read_streaming  # noqa: E402
from rnnx.verify.cases import plan_cases  # noqa: E402
from rnnx.verify.feeds import make_feed  # noqa: E402

THIRD_PARTY = Path(__file__).resolve().parent / "fixtures" / "third_party"
FILES = ["rnnx", "rnnx streaming", "torch.onnx, named axes", "torch.onnx, anonymous axes", "torch.onnx, anonymous axes through a Conv",
         "torch.onnx, packed tokens, anonymous axes"] + sorted(p.name for p in THIRD_PARTY.glob("*.onnx"))


class Tagger(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(6, 8, 3, padding=1)
        self.rnn = torch.nn.LSTM(8, 10, batch_first=True, bidirectional=True)
        self.out = torch.nn.Linear(20, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x.transpose(1, 2))).transpose(1, 2)
        return self.out(self.rnn(y)[0])


class Plain(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(6, 8)
        self.rnn = torch.nn.LSTM(8, 10, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(torch.tanh(self.inp(x)))[0]


class Causal(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(6, 8, 3)
        self.rnn = torch.nn.GRU(8, 10, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(torch.nn.functional.pad(x.transpose(1, 2), (2, 0))))
        return self.rnn(y.transpose(1, 2))[0]


class Tokens(torch.nn.Module):
    """Token ids and their lengths, packed (torch.onnx sorts them with a TopK and reorders the
    batch with a Gather): the wiring reaches the ids through the embedding and the lengths
    through the sort."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(50, 8)
        self.rnn = torch.nn.LSTM(8, 10, batch_first=True)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = torch.nn.utils.rnn.pack_padded_sequence(self.emb(ids), lengths, batch_first=True, enforce_sorted=False)
        return torch.nn.utils.rnn.pad_packed_sequence(self.rnn(packed)[0], batch_first=True, total_length=ids.shape[1])[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("agree")
    torch.manual_seed(0)
    out = {"rnnx": folder / "tagger.onnx", "rnnx streaming": folder / "causal.onnx",
           "torch.onnx, named axes": folder / "named.onnx", "torch.onnx, anonymous axes": folder / "anonymous.onnx",
           "torch.onnx, anonymous axes through a Conv": folder / "anonymous_conv.onnx"}
    model = Tagger().eval()
    assert rnnx.export(model, (torch.randn(1, 11, 6),), out["rnnx"]).passed  # a batch-1 example
    assert rnnx.export(Causal().eval(), (torch.randn(1, 12, 6),), out["rnnx streaming"], streaming=True).passed
    for key, axes, source in (("torch.onnx, named axes", {0: "N", 1: "T"}, model), ("torch.onnx, anonymous axes", {0: "d0", 1: "d1"}, Plain().eval()),
                              ("torch.onnx, anonymous axes through a Conv", {0: "d0", 1: "d1"}, model)):
        torch.onnx.export(source, (torch.randn(2, 11, 6),), str(out[key]), input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": axes, "y": axes}, opset_version=17, dynamo=False)
    for path in sorted(THIRD_PARTY.glob("*.onnx")):
        out[path.name] = path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Tokens().eval(), (torch.randint(0, 50, (3, 9)), torch.tensor([9, 4, 6])), str(folder / "tokens.onnx"),
                          input_names=["ids", "lengths"], output_names=["y"], opset_version=17, dynamo=False,
                          dynamic_axes={"ids": {0: "d0", 1: "d1"}, "lengths": {0: "d2"}})
    out["torch.onnx, packed tokens, anonymous axes"] = folder / "tokens.onnx"
    return out


def _asked(path: Path) -> dict[str, object]:
    proto = onnx.load(str(path))
    inputs = read_file_dims(proto)
    specs, roles = inputs.specs, inputs.roles
    labels = {d for s in specs for d in s.dims if isinstance(d, str)}
    [choice] = plan_build(proto, BuildOptions(), path.name, data_folder=path.parent)  # rnnx build's plan (bundle's is the same call)
    plan = plan_shapes(proto)
    record = read_streaming({p.key: p.value for p in proto.metadata_props}, *graph_ranks(proto))
    return {"proto": proto, "specs": specs, "labels": labels, "verify": {k: roles[k] for k in labels},
            "profile": {k: inputs.roles[k] for k in labels}, "rewrite": {k: plan.roles[k] for k in labels}, "plan": plan,
            "profile_shapes": choice.profile.shapes, "example": inputs.example, "record": record, "choice": choice}


@pytest.mark.parametrize("name", FILES)
def test_every_verb_gives_each_dimension_the_same_role(files, name) -> None:
    asked = _asked(files[name])
    assert asked["verify"] == asked["profile"] == asked["rewrite"], asked
    assert set(asked["verify"].values()) <= set(ROLES)
    # every file here has a batch and a length the verbs vary (the anonymous axes read from the wiring to the LSTM)
    assert {BATCH, LENGTH} <= set(asked["verify"].values()), asked["verify"]


@pytest.mark.parametrize("name", FILES)
def test_onnx_runtime_runs_every_shape_any_verb_picks_and_verify_stays_within_the_profile(files, name) -> None:
    asked = _asked(files[name])
    specs, proto = asked["specs"], asked["proto"]
    session = ort.InferenceSession(str(files[name]), providers=["CPUExecutionProvider"])
    picked: list[tuple[str, dict[str, list[int]]]] = []
    for case in plan_cases(specs, asked["verify"], asked["example"], None, None, {}):
        picked.append((f"verify {case.name}", case.shapes))
    profile = asked["profile_shapes"]
    for i, end in enumerate(("min", "opt", "max")):
        picked.append((f"profile {end}", {n: list(t[i]) for n, t in profile.items()}))
    _, sizes = candidates(asked["plan"])[0]
    picked.append(("rewrite check's first shapes", shapes_at(asked["plan"], sizes)))
    for case in bundle_cases(proto, specs, asked["choice"], asked["example"], asked["record"], 0, []):
        picked += [(f"bundle {case.name} chunk {k}", chunk.shapes) for k, chunk in enumerate(case.chunks)]
    for label, shapes in picked:
        feed = make_feed(specs, Case(label, {}, shapes), {}, 0)
        outs = session.run(None, feed)
        assert all(np.isfinite(np.asarray(o, np.float64)).all() for o in outs), label
    # an engine built with the default profile runs every case verify holds to the reference
    for label, shapes in picked:
        if not label.startswith("verify"):
            continue
        for n, shape in shapes.items():
            lo, _, hi = profile[n]
            assert all(a <= s <= b for a, s, b in zip(lo, shape, hi)), f"{label}: {n} {shape} outside the profile {lo}..{hi}"


def test_a_lengths_input_is_found_by_its_wiring_and_fed_lengths_within_the_sequence(files) -> None:
    asked = _asked(files["torch.onnx, packed tokens, anonymous axes"])
    lengths = next(s for s in asked["specs"] if s.name == "lengths")
    assert lengths.lengths_of == "d1" and asked["verify"]["d1"] == LENGTH, asked["verify"]
    for case in plan_cases(asked["specs"], asked["verify"], asked["example"], None, None, {}):
        feed = make_feed(asked["specs"], case, {}, 0)
        assert 1 <= feed["lengths"].min() and feed["lengths"].max() == feed["ids"].shape[1], case.name


def test_a_file_with_nothing_to_vary_is_said() -> None:
    from rnnx.shapes.cases import shape_note

    assert "ran at one shape only" in shape_note({"k": "other"}) and shape_note({"seq": LENGTH, "k": "other"}) == ""
