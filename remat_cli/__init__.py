"""remat: plan rematerialization so neural-network training fits in memory.

Data flows one way: file -> Graph -> training graph -> strategy -> Schedule -> simulator
-> report. Everything the CLI does is callable from here.
"""

from __future__ import annotations

__version__ = "0.1.0"

from remat_cli.budget import Budget, parse_budget  # noqa: E402
from remat_cli.errors import InputError, NoPlanError, RematError  # noqa: E402
from remat_cli.graph import Graph, NodeSpec  # noqa: E402
from remat_cli.loaders import LoadOptions, load_graph  # noqa: E402
from remat_cli.plan import Plan, read_plan, write_plan  # noqa: E402
from remat_cli.planner import make_plan  # noqa: E402
from remat_cli.schedule import Schedule  # noqa: E402
from remat_cli.simulate import Metrics, simulate, validate  # noqa: E402

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
