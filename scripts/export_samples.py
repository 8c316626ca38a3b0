#!/usr/bin/env python3
"""Export real architectures to ONNX, with random weights, as remat's sample graphs.

Needs torch, torchvision and transformers (only this script does; remat itself and its
tests never import them)::

    python3 -m venv /tmp/venv-export
    /tmp/venv-export/bin/pip install torch torchvision transformers onnx onnxscript
    /tmp/venv-export/bin/python scripts/export_samples.py            # all samples
    /tmp/venv-export/bin/python scripts/export_samples.py gpt2 unet  # some of them

Weights are never downloaded: every model is built from its architecture (torchvision
builders with ``weights=None``, ``transformers`` configs) with random initial values.
The models are exported in training mode, so that BatchNormalization and Dropout appear as
they run during training (batch statistics, dropout masks). Weights are then moved to an
external data file which is deleted: the committed ``.onnx`` keeps the structure and every
initializer's shape and dtype, which is all remat needs, and stays well under 2 MB.

Each export records its inputs (names, shapes with symbolic dimensions) in
``scripts/sample_shapes.json``; ``sample_graphs/README.md`` is written from it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "sample_graphs"
OPSET = 20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"samples to export (default: all of {', '.join(SAMPLES)})")
    parser.add_argument("--out", type=Path, default=OUT, help="output directory (default: sample_graphs/)")
    args = parser.parse_args(argv)
    try:
        import onnx  # noqa: F401
        import torch
    except ImportError as exc:
        print(
            f"export_samples: needs torch, torchvision, transformers and onnx ({exc}); pip install 'remat-cli[export-samples]'",
            file=sys.stderr,
        )
        return 2
    names = args.names or list(SAMPLES)
    unknown = [n for n in names if n not in SAMPLES]
    if unknown:
        print(f"export_samples: unknown sample(s) {', '.join(unknown)}; choose from {', '.join(SAMPLES)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    index_path = Path(__file__).resolve().parent / "sample_shapes.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    torch.manual_seed(0)
    for name in names:
        entry = export_one(name, args.out)
        index[name] = entry
        print(f"{entry['file']}: {entry['nodes']} ops, {entry['parameters']:,} parameters, {entry['file_bytes']:,} bytes")
    index = {k: index[k] for k in sorted(index)}
    index_path.write_text(json.dumps(index, indent=1) + "\n")
    (args.out / "README.md").write_text(render_readme(index))
    return 0


# ---------------------------------------------------------------------------- models
def build_resnet18():
    import torchvision

    return torchvision.models.resnet18(weights=None), _image_inputs(224)


def build_mobilenet_v2():
    import torchvision

    return torchvision.models.mobilenet_v2(weights=None), _image_inputs(224)


def build_vit_b16():
    import torchvision

    return torchvision.models.vit_b_16(weights=None), _image_inputs(224)


def build_unet():
    return UNet(in_channels=3, classes=2, base=32, depth=4), _image_inputs(256)


def build_bert():
    """A BERT-base encoder (12 layers, hidden 768) from its config; eager attention."""
    import torch
    from transformers import BertConfig, BertModel

    config = BertConfig(attn_implementation="eager")
    model = BertModel(config, add_pooling_layer=False)

    class Encoder(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids):
            return self.inner(input_ids=input_ids, return_dict=False)[0]

    return Encoder(model), _token_inputs(config.vocab_size, 128)


def build_gpt2():
    """A GPT-2 small decoder (12 layers, hidden 768) with its LM head; eager attention, no cache."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    # gelu_pytorch_tanh is GPT-2's tanh-approximated GELU ("gelu_new") computed by one op,
    # so the export holds one Gelu node rather than its eight-op decomposition
    config = GPT2Config(attn_implementation="eager", use_cache=False, activation_function="gelu_pytorch_tanh")
    model = GPT2LMHeadModel(config)

    class Decoder(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids):
            # an all-ones padding mask: without one, transformers probes position ids for
            # packed sequences with torch.diff, which the exporter cannot translate
            mask = torch.ones_like(input_ids)
            return self.inner(input_ids=input_ids, attention_mask=mask, use_cache=False, return_dict=False)[0]

    return Decoder(model), _token_inputs(config.vocab_size, 128)


def _image_inputs(size: int):
    import torch

    return {
        "args": (torch.randn(2, 3, size, size),),
        "input_names": ["input"],
        "output_names": ["logits"],
        "dynamic_axes": {"input": {0: "batch"}, "logits": {0: "batch"}},
        "shapes": {"input": ["batch", 3, size, size]},
        "example_dims": {"batch": 8},
    }


def _token_inputs(vocab: int, seq: int):
    import torch

    return {
        "args": (torch.randint(0, vocab, (2, seq)),),
        "input_names": ["input_ids"],
        "output_names": ["output"],
        "dynamic_axes": {"input_ids": {0: "batch", 1: "sequence"}, "output": {0: "batch", 1: "sequence"}},
        "shapes": {"input_ids": ["batch", "sequence"]},
        "example_dims": {"batch": 8, "sequence": 512},
    }


def _unet_class():
    import torch
    from torch import nn

    class DoubleConv(nn.Sequential):
        def __init__(self, cin: int, cout: int):
            super().__init__(
                nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True),
                nn.Conv2d(cout, cout, 3, padding=1, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True),
            )

    class UNetModel(nn.Module):
        """Ronneberger et al. 2015: an encoder of double convolutions and max pooling, a
        decoder of transposed convolutions whose outputs are concatenated with the encoder's
        (the skips), and a 1x1 convolution to the class scores."""

        def __init__(self, in_channels: int, classes: int, base: int, depth: int):
            super().__init__()
            widths = [base * 2**i for i in range(depth + 1)]
            self.down = nn.ModuleList([DoubleConv(in_channels, widths[0])])
            self.down.extend(DoubleConv(widths[i], widths[i + 1]) for i in range(depth))
            self.pool = nn.MaxPool2d(2)
            self.up = nn.ModuleList(nn.ConvTranspose2d(widths[i + 1], widths[i], 2, stride=2) for i in reversed(range(depth)))
            self.dec = nn.ModuleList(DoubleConv(2 * widths[i], widths[i]) for i in reversed(range(depth)))
            self.head = nn.Conv2d(widths[0], classes, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            skips = []
            for i, block in enumerate(self.down):
                x = block(x if i == 0 else self.pool(x))
                skips.append(x)
            skips.pop()
            for up, dec in zip(self.up, self.dec):
                x = dec(torch.cat([skips.pop(), up(x)], dim=1))
            return self.head(x)

    return UNetModel


def UNet(**kw):  # noqa: N802 - a factory that reads like the class it builds
    return _unet_class()(**kw)


SAMPLES = {
    "resnet18": (build_resnet18, "ResNet-18 (torchvision), image classification"),
    "mobilenet_v2": (build_mobilenet_v2, "MobileNetV2 (torchvision), image classification"),
    "unet": (build_unet, "U-Net, 4 levels, base width 32, segmentation (written in this script)"),
    "vit_b16": (build_vit_b16, "ViT-B/16 (torchvision), image classification"),
    "bert": (build_bert, "BERT-base encoder (transformers config, eager attention)"),
    "gpt2": (build_gpt2, "GPT-2 small decoder with LM head (transformers config, eager attention)"),
}


# ---------------------------------------------------------------------------- export
def export_one(name: str, out_dir: Path) -> dict:
    """Export one sample in training mode, strip its weights, and describe it."""
    import onnx
    import torch

    build, description = SAMPLES[name]
    model, spec = build()
    model.train()
    path = out_dir / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            spec["args"],
            str(path),
            dynamo=False,
            training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False,
            input_names=spec["input_names"],
            output_names=spec["output_names"],
            dynamic_axes=spec["dynamic_axes"],
            opset_version=OPSET,
        )
    proto = onnx.load(str(path))
    params = sum(p.numel() for p in model.parameters())  # trainable; shared weights once
    strip_weights(proto, path)
    ops = Counter(n.op_type for n in proto.graph.node)
    return {
        "file": f"sample_graphs/{path.name}",
        "description": description,
        "inputs": spec["shapes"],
        "outputs": spec["output_names"],
        "example_dims": spec["example_dims"],
        "parameters": params,
        "nodes": len(proto.graph.node),
        "ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "opset": OPSET,
        "exported_with": f"torch {torch.__version__}, legacy exporter, training mode",
        "file_bytes": path.stat().st_size,
    }


def strip_weights(proto, path: Path) -> None:
    """Move every initializer above 1 KiB to an external file, then delete that file.

    What stays: names, dtypes and shapes of all initializers, and the small constants
    (shape vectors, scalars) that shape inference needs.
    """
    import onnx

    data_name = path.name + ".data"
    onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=data_name, size_threshold=1024)
    data = path.parent / data_name
    if data.exists():
        os.remove(data)


def _numel(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def render_readme(index: dict) -> str:
    lines = [
        "# Sample graphs",
        "",
        "Real architectures exported to ONNX by `scripts/export_samples.py` (random weights, never",
        "downloaded; exported in training mode; weights stripped, so each file holds structure,",
        "shapes and dtypes only). Symbolic dimensions are set with `--dim`, e.g.",
        "`remat info sample_graphs/resnet18.onnx --dim batch=8`.",
        "",
        "| file | model | inputs | ops | parameters | example dims |",
        "|---|---|---|---:|---:|---|",
    ]
    for entry in index.values():
        inputs = "; ".join(f"`{k}` [{', '.join(str(d) for d in v)}]" for k, v in entry["inputs"].items())
        dims = " ".join(f"`--dim {k}={v}`" for k, v in entry["example_dims"].items())
        lines.append(
            f"| `{entry['file'].split('/')[-1]}` | {entry['description']} | {inputs} | {entry['nodes']} | {entry['parameters']:,} | {dims} |"
        )
    lines += ["", "Machine-readable: `scripts/sample_shapes.json` (inputs, example dims, op counts, exporter)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
