"""The ``remat check`` configuration: ``remat.toml``, or ``[tool.remat]`` in ``pyproject.toml``.

A repository lists its models with their dimensions, budgets and limits once, so CI runs
``remat check`` with no arguments. The format (see ``docs/ci.md``)::

    budget = "24GiB"          # defaults for every model
    max_overhead = "30%"
    strategy = "auto"
    timeout = 600             # seconds per model
    jobs = 2
    junit = "remat-report.xml"
    dims = { batch = 32 }

    [[models]]
    path = "models/resnet50.onnx"   # relative to this file; globs and directories allowed
    dims = { batch = 64 }           # merged over the defaults
    budget = "16GiB"
    max_overhead = "25%"

Unknown keys are errors (a misspelt ``budegt`` must not silently pass a CI gate).
"""

from __future__ import annotations

import glob as globlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remat_cli.budget import Budget, parse_budget
from remat_cli.errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = ["ModelEntry", "CheckConfig", "find_config", "load_config", "parse_overhead", "parse_dims"]

CONFIG_NAME = "remat.toml"
_LOAD_KEYS = ("training", "inference", "convention", "optimizer", "device", "cost_model", "precision", "world_size", "shard")
_COMMON_KEYS = ("budget", "max_overhead", "strategy", "dims", "max_nodes", *_LOAD_KEYS)
_TOP_KEYS = frozenset((*_COMMON_KEYS, "models", "timeout", "jobs", "junit"))
_MODEL_KEYS = frozenset((*_COMMON_KEYS, "path", "name"))


@dataclass(frozen=True)
class ModelEntry:
    """One model to check, with every setting resolved (model entry over file defaults)."""

    path: str
    name: str
    dims: tuple[tuple[str, int], ...] = ()
    budget: Budget | None = None
    max_overhead: float | None = None
    strategy: str | None = None
    max_nodes: int | None = None
    training: bool | None = None
    convention: str | None = None
    optimizer: str | None = None
    device: str | None = None
    cost_model: str | None = None
    precision: str | None = None  # fp32 | bf16 | fp16 | amp (precision.py)
    world_size: int | None = None  # data-parallel devices (sharding.py)
    shard: str | None = None  # none | optimizer | gradients | parameters


@dataclass(frozen=True)
class CheckConfig:
    """A parsed configuration file: its models and run settings."""

    source: str
    models: tuple[ModelEntry, ...]
    defaults: ModelEntry
    timeout: float | None = None
    jobs: int | None = None
    junit: str | None = None


def find_config(start: str | Path | None = None) -> Path | None:
    """The nearest ``remat.toml``, or ``pyproject.toml`` with ``[tool.remat]``, from ``start`` up.

    The search stops at the repository root (a directory holding ``.git``).
    """
    here = Path(start or os.getcwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / CONFIG_NAME
        if candidate.is_file():
            return candidate
        pyproject = directory / "pyproject.toml"
        if pyproject.is_file() and _has_tool_remat(pyproject):
            return pyproject
        if (directory / ".git").exists():
            return None
    return None


def _has_tool_remat(path: Path) -> bool:
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return isinstance(doc.get("tool"), dict) and "remat" in doc["tool"]


def load_config(path: str | Path, cwd: str | Path | None = None) -> CheckConfig:
    """Read a configuration file; model paths are resolved against its directory.

    Paths are reported relative to ``cwd`` (default: the current directory) when below it.
    """
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no such configuration file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML: {exc}") from None
    where = str(path)
    if path.name == "pyproject.toml":
        table = doc.get("tool", {}).get("remat") if isinstance(doc.get("tool"), dict) else None
        if not isinstance(table, dict):
            raise InputError(f"{path}: no [tool.remat] table")
        doc, where = table, f"{path} [tool.remat]"
    _check_keys(doc, _TOP_KEYS, where)
    defaults = _entry(doc, where, base=None, path="", name="")
    base_dir = path.resolve().parent
    models_doc = doc.get("models", [])
    if not isinstance(models_doc, list) or not all(isinstance(m, dict) for m in models_doc):
        raise InputError(f"{where}: models must be an array of tables ([[models]])")
    models: list[ModelEntry] = []
    for k, mdoc in enumerate(models_doc, 1):
        mwhere = f"{where}: models #{k}"
        _check_keys(mdoc, _MODEL_KEYS, mwhere)
        if not isinstance(mdoc.get("path"), str) or not mdoc["path"]:
            raise InputError(f'{mwhere}: needs path = "…" (a model file, a glob or a directory)')
        for file in _expand(mdoc["path"], base_dir, mwhere):
            shown = _shown(file, Path(cwd or os.getcwd()))
            name = str(mdoc.get("name") or shown)
            models.append(_entry(mdoc, mwhere, base=defaults, path=shown, name=name))
    if not models:
        raise InputError(f"{where}: lists no models (add [[models]] tables with a path)")
    return CheckConfig(
        source=str(path),
        models=tuple(models),
        defaults=defaults,
        timeout=_number(doc, "timeout", where, float),
        jobs=_number(doc, "jobs", where, int),
        junit=_string(doc, "junit", where),
    )


def _check_keys(doc: dict[str, Any], allowed: frozenset[str], where: str) -> None:
    for key in doc:
        if key not in allowed:
            raise InputError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(allowed))})")


def _entry(doc: dict[str, Any], where: str, *, base: ModelEntry | None, path: str, name: str) -> ModelEntry:
    """A model entry from ``doc``, falling back to ``base`` for what it does not set."""
    budget = _budget(doc, where)
    overhead = parse_overhead(doc["max_overhead"], where) if "max_overhead" in doc else None
    dims = dict(base.dims) if base else {}
    if "dims" in doc:
        dims.update(parse_dims(doc["dims"], where))
    training = _bool(doc, "training", where)
    inference = _bool(doc, "inference", where)
    if inference is not None:
        if training is not None and training == inference:
            raise InputError(f"{where}: training and inference contradict each other")
        training = not inference
    values = dict(
        path=path,
        name=name,
        dims=tuple(sorted(dims.items())),
        budget=budget,
        max_overhead=overhead,
        strategy=_string(doc, "strategy", where),
        max_nodes=_number(doc, "max_nodes", where, int),
        training=training,
        convention=_string(doc, "convention", where),
        optimizer=_string(doc, "optimizer", where),
        device=_string(doc, "device", where),
        cost_model=_string(doc, "cost_model", where),
        precision=_string(doc, "precision", where),
        world_size=_number(doc, "world_size", where, int),
        shard=_string(doc, "shard", where),
    )
    if base is not None:
        for key, value in list(values.items()):
            if value is None:
                values[key] = getattr(base, key)
    return ModelEntry(**values)


def parse_overhead(value: Any, where: str = "--max-overhead") -> float:
    """``30%`` or ``0.3`` -> 0.3 (extra compute allowed, as a fraction of the base cost)."""
    text = str(value).strip()
    try:
        result = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise InputError(f"{where}: cannot read max overhead {value!r}: use a percentage (30%) or a fraction (0.3)") from None
    if result < 0 or result != result:
        raise InputError(f"{where}: max overhead {value!r} must be zero or more")
    return result


def parse_dims(value: Any, where: str = "--dim") -> dict[str, int]:
    """``{batch = 32}`` or ``["batch=32"]`` -> {"batch": 32}."""
    items: list[tuple[Any, Any]]
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = []
        for item in value:
            if not isinstance(item, str) or "=" not in item:
                raise InputError(f"{where}: dims entries are NAME=VALUE strings, got {item!r}")
            key, _, val = item.partition("=")
            items.append((key.strip(), val.strip()))
    else:
        raise InputError(f'{where}: dims must be a table {{ batch = 32 }} or a list of "batch=32"')
    out: dict[str, int] = {}
    for key, val in items:
        try:
            number = int(val)
        except (TypeError, ValueError):
            raise InputError(f"{where}: dim {key!r} must be a whole number, got {val!r}") from None
        if number <= 0 or isinstance(val, bool):
            raise InputError(f"{where}: dim {key!r} must be a positive whole number, got {val!r}")
        out[str(key)] = number
    return out


def _budget(doc: dict[str, Any], where: str) -> Budget | None:
    if "budget" not in doc:
        return None
    value = doc["budget"]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(f'{where}: budget must be a string such as "24GiB" or "0.8x", or a number of bytes')
    try:
        return parse_budget(str(value))
    except InputError as exc:
        raise InputError(f"{where}: {exc.message}") from None


def _string(doc: dict[str, Any], key: str, where: str) -> str | None:
    if key not in doc:
        return None
    if not isinstance(doc[key], str):
        raise InputError(f"{where}: {key} must be a string, got {doc[key]!r}")
    return doc[key]


def _bool(doc: dict[str, Any], key: str, where: str) -> bool | None:
    if key not in doc:
        return None
    if not isinstance(doc[key], bool):
        raise InputError(f"{where}: {key} must be true or false, got {doc[key]!r}")
    return doc[key]


def _number(doc: dict[str, Any], key: str, where: str, kind: type) -> Any:
    if key not in doc:
        return None
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise InputError(f"{where}: {key} must be a {'whole ' if kind is int else ''}number, got {value!r}")
    if not value > 0:  # (nan too: TOML has it, and it passes every comparison but this)
        raise InputError(f"{where}: {key} must be positive, got {value!r}")
    return kind(value)


def _expand(pattern: str, base: Path, where: str) -> list[Path]:
    """A model path, glob or directory (relative to the config file) -> files, sorted."""
    full = pattern if os.path.isabs(pattern) else str(base / pattern)
    if any(ch in pattern for ch in "*?["):
        matches = sorted(Path(p) for p in globlib.glob(full, recursive=True) if Path(p).is_file())
        if not matches:
            raise InputError(f"{where}: {pattern!r} matches no files")
        return matches
    target = Path(full)
    if target.is_dir():
        from remat_cli.batch import discover

        files = [Path(p) for p in discover([target])]
        if not files:
            raise InputError(f"{where}: directory {pattern!r} holds no graph files")
        return files
    return [target]  # a missing file is reported by the check itself, as bad input


def _shown(path: Path, cwd: Path) -> str:
    """``path`` relative to ``cwd`` when below it, else absolute."""
    absolute = path.resolve() if path.exists() else Path(os.path.abspath(path))
    try:
        return absolute.relative_to(cwd.resolve()).as_posix()
    except ValueError:
        return str(absolute)
