"""An MLP chain: 8 Linear+ReLU layers. `remat capture examples/mlp.py:make mlp.json`."""

import torch
from torch import nn


def make(batch: int = 512, width: int = 256, depth: int = 8):
    """(model, inputs, loss_fn): mean squared output as the loss."""
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers)
    x = torch.randn(batch, width)
    return model, (x,), lambda out: out.pow(2).mean()
