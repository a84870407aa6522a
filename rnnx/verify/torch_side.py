"""The torch side of a whole-model verify: whether ``--against`` names model code, loading it,
and each recurrent layer's truth, the weights of the torch module (and layer) it came from."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from rnnx.errors import RNNXError
from rnnx.exporters.loading import load_checkpoint, load_model as load_torch_model_from
from rnnx.formats.files import from_format
from rnnx.verify.layers import Layer, Truth, single_layer
from rnnx.weights import RNNWeights

_TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".ts", ".torchscript", ".jit")


def is_model_code(against: str | Path) -> bool:
    """Whether ``--against`` names model code (``file.py:NAME``, ``package.module:NAME``) or a
    TorchScript file, rather than a weights file."""
    text = str(against)
    path = Path(text)
    if path.is_file():
        if path.suffix.lower() not in _TORCHSCRIPT_SUFFIXES:
            return False
        try:
            with zipfile.ZipFile(path) as z:  # TorchScript archives hold their code; a state_dict has none
                return any("/code/" in n or n.endswith("constants.pkl") for n in z.namelist()[:10000])
        except (zipfile.BadZipFile, OSError):
            return False
    source, sep, name = text.rpartition(":")
    return bool(sep and source and name.isidentifier() and (source.endswith(".py") or all(p.isidentifier() for p in source.split("."))))


def load_torch_model(against: str, checkpoint: Path | None) -> tuple[Any, Any]:
    model, example = load_torch_model_from(str(against))
    if checkpoint is not None:
        load_checkpoint(model, Path(checkpoint))
    return model.eval(), example


def _recurrent_modules(model: Any) -> list[tuple[str, Any, RNNWeights]]:
    """(name, module, its canonical weights) of every nn.LSTM/GRU/RNN and cell, in module order."""
    from rnnx.exporters.modules import CELL_MODULES, RECURRENT_MODULES, spec_of_module

    found = []
    for name, module in model.named_modules():
        kind = getattr(module, "original_name", type(module).__name__)
        if isinstance(module, RECURRENT_MODULES + CELL_MODULES):
            spec = spec_of_module(module)
        elif kind in ("LSTM", "GRU", "RNN"):  # a TorchScript module: the spec is in its weights' names
            spec = None
        else:
            continue
        state = {k: v.detach().cpu().float() for k, v in module.state_dict().items()}
        try:
            found.append((name, module, from_format(state, "torch", spec=spec)))
        except RNNXError:
            continue
    return found


def layer_truths(model: Any, layers: list[Layer], recurrences: list[dict[str, Any]]) -> tuple[dict[str, Truth], list[str]]:
    """For each layer, the weights of the torch module (and layer) it came from; and notes."""
    modules = {name: weights for name, _, weights in _recurrent_modules(model)}
    truths: dict[str, Truth] = {}
    for rec in recurrences:  # rnnx export's record: module -> its nodes, in layer order
        weights = modules.get(str(rec.get("module")))
        nodes = rec.get("nodes")
        if weights is None:
            continue
        for k, node in enumerate(nodes if isinstance(nodes, list) else []):
            layer = 0 if rec.get("cell") else k
            if layer < weights.spec.num_layers:
                truths[str(node)] = Truth(single_layer(weights, layer), f"torch module '{rec['module']}'" + (f" layer {layer}" if weights.spec.num_layers > 1 else ""), layer)
    notes = []
    unmatched = [la for la in layers if la.name not in truths]
    if unmatched:  # a file from another exporter: match layers to modules by spec, in order
        # The layers of one module come in order; between modules of the same spec the order
        # proves nothing (a forward and a backward RNN of one size), so a layer that two such
        # modules could own is not paired: a guess must not fail a file.
        claimed = {t.said.split("'")[1] for t in truths.values() if t.said.startswith("torch module '")}
        pool = [(name, k, single_layer(w, k)) for name, w in modules.items() if name not in claimed for k in range(w.spec.num_layers)]
        used: set[int] = set()
        ambiguous: dict[str, list[str]] = {}
        for la in unmatched:
            if la.spec is None:
                continue
            fits = [i for i, (_, _, w) in enumerate(pool) if i not in used and w.spec.with_(bias=True) == la.spec.with_(bias=True)]
            owners = list(dict.fromkeys(pool[i][0] for i in fits))
            if len(owners) > 1:
                ambiguous[la.name] = owners
                continue
            if fits:
                i = fits[0]
                name, k, w = pool[i]
                used.add(i)
                truths[la.name] = Truth(w, f"torch module '{name}'" + (f" layer {k}" if modules[name].spec.num_layers > 1 else "") + " (matched by spec)", k)
        for layer_name, owners in ambiguous.items():
            notes.append(f"layer {layer_name} could come from any of torch modules {', '.join(repr(o) for o in owners)} (the same spec, and the file "
                         "does not say which): not checked layer by layer; the outputs are checked end to end")
        still = [la.name for la in unmatched if la.name not in truths and la.name not in ambiguous]
        if still:
            notes.append(f"no torch module matches layer(s) {', '.join(still)}: checked against their own weights (arithmetic only)")
    covered = {t.said.split("'")[1] for t in truths.values() if t.said.startswith("torch module '")}
    missing = [name for name in modules if name not in covered]
    if missing:
        notes.append(f"torch module(s) {', '.join(repr(m) for m in missing)} have no recurrent layer rnnx can find in the graph "
                     "(unrolled into plain operators, or inside a loop body): their part is checked end to end only, not layer by layer")
    return truths, notes
