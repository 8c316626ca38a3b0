"""remat: plan rematerialization so neural-network training fits in memory.

Data flows one way: file -> Graph -> training graph -> strategy -> Schedule -> simulator
-> report. Everything the CLI does is callable from here.
"""

from __future__ import annotations

__version__ = "0.1.0"

import sys  # noqa: E402
import types  # noqa: E402

# Public names are imported on first use (PEP 562), so that `remat --version` does not
# pay for numpy and the strategies: start-up time matters for a command-line tool.
_LAZY = {
    "Budget": "remat_cli.budget",
    "parse_budget": "remat_cli.budget",
    "InputError": "remat_cli.errors",
    "NoPlanError": "remat_cli.errors",
    "RematError": "remat_cli.errors",
    "Graph": "remat_cli.graph",
    "NodeSpec": "remat_cli.graph",
    "LoadOptions": "remat_cli.loaders",
    "load_graph": "remat_cli.loaders",
    "Plan": "remat_cli.plandoc",
    "read_plan": "remat_cli.plandoc",
    "write_plan": "remat_cli.plandoc",
    "make_plan": "remat_cli.planner",
    "Schedule": "remat_cli.schedule",
    "Metrics": "remat_cli.simulate",
    "simulate": "remat_cli.simulate",
    "validate": "remat_cli.simulate",
}


def __getattr__(name: str) -> object:
    """Import a public name from its module the first time it is asked for."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'remat_cli' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """Keeps ``remat_cli.simulate`` the function, as the eager imports made it: importing
    the submodule of the same name would otherwise bind the module over it."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = [
    "Budget",
    "Graph",
    "InputError",
    "LoadOptions",
    "Metrics",
    "NoPlanError",
    "NodeSpec",
    "Plan",
    "RematError",
    "Schedule",
    "load_graph",
    "make_plan",
    "parse_budget",
    "read_plan",
    "simulate",
    "validate",
    "write_plan",
]
