"""The layering of docs/architecture.md, enforced: ``lint-imports`` checks the layered
contract in pyproject.toml ([tool.importlinter]) over every import in remat_cli, lazy
imports inside functions included. A lower layer importing a higher one fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_layers_contract_is_kept() -> None:
    pytest.importorskip("importlinter", reason="import-linter is in the test extra")
    cmd = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"]
    res = subprocess.run([*cmd, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "1 kept, 0 broken" in res.stdout


def test_contract_names_every_module_of_the_package() -> None:
    """A new top-level module or subpackage must be placed in a layer, or it is unchecked."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11+")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    listed = {name.strip() for layer in contract["layers"] for name in layer.replace("|", ":").split(":")}
    package = ROOT / "remat_cli"
    present = {p.stem for p in package.glob("*.py") if not p.stem.startswith("__")}
    present |= {p.name for p in package.iterdir() if (p / "__init__.py").exists()}
    assert present == listed, f"not in a layer: {sorted(present - listed)}; gone: {sorted(listed - present)}"
