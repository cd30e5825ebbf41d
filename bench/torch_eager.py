"""The bench models of ``real_models.py`` as PyTorch modules (random weights, same shapes),
for ``bench/gpu.py``'s PyTorch-eager column. Only timing is compared, never values."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.a = nn.Conv2d(cin, cout, 3, stride, 1)
        self.b = nn.Conv2d(cout, cout, 3, 1, 1)
        self.skip = nn.Conv2d(cin, cout, 1, stride) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.b(torch.relu(self.a(x))) + self.skip(x))


def resnet18() -> tuple[nn.Module, list[torch.Tensor]]:
    layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [_Block(cin, cout, stride), _Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    return nn.Sequential(*layers), [torch.randn(1, 3, 224, 224)]


class _Encoder(nn.Module):
    def __init__(self, seq: int = 128, d: int = 256, heads: int = 4, ffn: int = 1024,
                 vocab: int = 8000) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.norm = nn.LayerNorm(d, eps=1e-12)
        layer = nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0, activation="gelu",
                                           batch_first=True, layer_norm_eps=1e-12)
        self.layers = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)[None]
        return self.layers(self.norm(self.tok(ids) + self.pos(pos)))


class _Tagger(nn.Module):
    def __init__(self, emb: int = 128, hidden: int = 256, tags: int = 20, vocab: int = 5000) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, bidirectional=True)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(self.emb(tokens))           # [seq, 1, 2h]
        return torch.log_softmax(self.out(y[:, 0]), dim=-1)


BUILDERS: dict[str, Callable[[], tuple[nn.Module, list[Any]]]] = {
    "resnet18": resnet18,
    "transformer2": lambda: (_Encoder(), [torch.randint(0, 8000, (1, 128))]),
    "lstm_tagger": lambda: (_Tagger(), [torch.randint(0, 5000, (100, 1))]),
}
