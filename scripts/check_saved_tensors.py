#!/usr/bin/env python3
"""Compare the autograd convention with PyTorch: bytes kept for the backward pass.

For each image sample, PyTorch runs one training-mode forward pass under
``torch.autograd.graph.saved_tensors_hooks`` and the distinct storages it saves (not
parameters, buffers or the input) are summed. remat's figure is the sum of the sizes of the
forward nodes (and statistics nodes) that some backward node reads, in the training graph
built from the committed ONNX file. Needs torch and torchvision (like export_samples.py);
prints figures, asserts nothing::

    /tmp/venv-export/bin/python scripts/check_saved_tensors.py --batch 8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def torch_saved_bytes(model, x) -> int:
    """Bytes of the distinct storages autograd saves during one forward pass."""
    import torch

    skip = {p.untyped_storage().data_ptr() for p in model.parameters()}
    skip |= {b.untyped_storage().data_ptr() for b in model.buffers()}
    skip.add(x.untyped_storage().data_ptr())
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(seen.values())


def remat_saved_bytes(path: Path, batch: int) -> int:
    from remat_cli.loaders import LoadOptions, load_graph

    g = load_graph(path, LoadOptions(dims=(("batch", batch),)))
    backward = [k == "backward" for k in g.kinds]
    return sum(int(g.mem[v]) for v in range(g.n) if g.kinds[v] == "forward" and any(backward[w] for w in g.succ_lists[v]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args(argv)
    try:
        import torch
        from export_samples import SAMPLES
    except ImportError as exc:
        print(f"check_saved_tensors: needs torch and torchvision ({exc})", file=sys.stderr)
        return 2
    print(f"{'model':14} {'PyTorch MiB':>12} {'remat MiB':>10} {'ratio':>6}")
    for name in ("resnet18", "mobilenet_v2", "unet", "vit_b16"):
        build = SAMPLES[name][0]
        model, spec = build()
        model.train()
        shape = list(spec["args"][0].shape)
        shape[0] = args.batch
        theirs = torch_saved_bytes(model, torch.randn(*shape))
        ours = remat_saved_bytes(ROOT / "sample_graphs" / f"{name}.onnx", args.batch)
        print(f"{name:14} {theirs / 2**20:12.1f} {ours / 2**20:10.1f} {ours / theirs:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
