"""The PyTorch bridge (optional extra ``remat-cli[torch]``): capture, apply, measure.

``capture`` turns a model and example inputs into an ordinary remat training graph,
``apply`` runs a training step that follows a plan's schedule exactly, ``measure``
reports what a step really uses (peak bytes, FLOPs, seconds). Importing this package
does not import torch; the first use does, and says how to install it when missing.
"""

from __future__ import annotations

from typing import Any

from remat_cli.errors import InputError

__all__ = ["capture", "apply", "measure", "Measurement", "checkpoint_policy", "require_torch"]

_PUBLIC = {
    "capture": "remat_cli.torch._capture",
    "apply": "remat_cli.torch._apply",
    "checkpoint_policy": "remat_cli.torch._apply",
    "measure": "remat_cli.torch._measure",
    "Measurement": "remat_cli.torch._measure",
}

INSTALL_HINT = "PyTorch is not installed: pip install 'remat-cli[torch]' (or pip install torch)"


def require_torch(what: str = "this command") -> None:
    """Raise a one-line :class:`InputError` (exit 2) when torch cannot be imported."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise InputError(f"{what} needs PyTorch: {INSTALL_HINT}") from None


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        require_torch(f"remat_cli.torch.{name}")
        import importlib

        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(name)
