"""A small transformer encoder: attention, LayerNorm, dropout.
`remat capture examples/transformer.py:make tf.json`."""

import math

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, heads: int, p: float) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.drop = nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // self.heads), dim=-1)
        y = (self.drop(att) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.ff(self.ln2(x)))


def make(batch: int = 4, seq: int = 64, d: int = 64, heads: int = 4, depth: int = 2):
    """(model, inputs): the loss is the sum of the outputs (no loss_fn)."""
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(d, heads, 0.1) for _ in range(depth)])
    x = torch.randn(batch, seq, d)
    return model, (x,)
