"""A small sequence tagger for the README's tour: token embeddings, a 2-layer bidirectional
LSTM and a per-token classifier. ``rnnx export examples/tagger.py:model`` exports it;
``example_inputs`` is the example the export traces and checks with (batch 2, 12 tokens)."""

import torch
from torch import nn


class Tagger(nn.Module):
    def __init__(self, vocab: int = 50, dim: int = 16, hidden: int = 24, tags: int = 5) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.rnn = nn.LSTM(dim, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(self.embed(tokens))
        return self.out(y).log_softmax(-1)


torch.manual_seed(0)  # the same weights each time this file is imported: export and verify load it separately
model = Tagger().eval()
example_inputs = (torch.randint(0, 50, (2, 12)),)
