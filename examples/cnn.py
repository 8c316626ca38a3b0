"""A small residual CNN with BatchNorm. `remat capture examples/cnn.py:make cnn.json`."""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


class ResNet(nn.Module):
    def __init__(self, c: int = 16, blocks: int = 3, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.blocks = nn.Sequential(*[Block(c) for _ in range(blocks)])
        self.head = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(torch.relu(self.stem(x)))
        return self.head(x.mean(dim=(2, 3)))


def make(batch: int = 8, size: int = 32):
    """(model, inputs, loss_fn): cross-entropy against fixed labels."""
    torch.manual_seed(0)
    model = ResNet()
    x = torch.randn(batch, 3, size, size)
    labels = torch.arange(batch) % 10
    return model, (x,), lambda logits: nn.functional.cross_entropy(logits, labels.to(logits.device))
