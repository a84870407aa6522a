"""Regenerate the example checkpoint shipped in this folder (needs torch).

examples/encoder.safetensors is the state_dict of a small speech-style encoder: a linear
front end, a 2-layer bidirectional LSTM and a classifier head, saved with PyTorch's key
names. It is what `make demo` converts.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.frontend = torch.nn.Linear(40, 24)
        self.rnn = torch.nn.LSTM(24, 32, num_layers=2, bidirectional=True)
        self.head = torch.nn.Linear(64, 10)


def main() -> None:
    torch.manual_seed(2026)
    model = Encoder().eval()
    out = Path(__file__).with_name("encoder.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out), metadata={"format": "torch"})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
