"""``Graph.with_arrays`` rebuilds a graph with one or two parts changed: the result is the
graph :meth:`Graph.from_arrays` builds when every part is written out, as the rebuilds it
replaced did."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import raw_dags
from remat_cli import generators
from remat_cli.errors import InputError
from remat_cli.graph import Graph
from remat_cli.simulate import require_valid
from remat_cli.strategies.store_all import store_all_schedule
from remat_cli.training import checkmate_training_graph


def same_graph(a: Graph, b: Graph) -> None:
    """Every field of the two graphs is equal (arrays by value and dtype)."""
    for name in Graph.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            assert x is not None and y is not None, name
            assert x.dtype == y.dtype and np.array_equal(x, y), name
        else:
            assert x == y, name


def _written_out(g: Graph, **changes: Any) -> Graph:
    """The rebuild with every part written out, as call sites did before with_arrays."""
    src, dst = g.edges()
    parts: dict[str, Any] = dict(
        ids=g.ids,
        ops=g.ops,
        kinds=g.kinds,
        mem=g.mem,
        cost=g.cost,
        workspace=g.workspace,
        src=src,
        dst=dst,
        targets=g.targets,
        fixed_mem=g.fixed_mem,
        cost_unit=g.cost_unit,
        seconds=g.seconds,
        name=g.name,
        meta=g.meta,
    )
    parts.update(changes)
    return Graph.from_arrays(**parts)


@settings(max_examples=40, deadline=None)
@given(raw=raw_dags(), data=st.data())
def test_with_arrays_is_the_written_out_rebuild(raw, data) -> None:
    g = raw.build()
    n = g.n
    sizes = st.lists(st.integers(0, 50), min_size=n, max_size=n).map(lambda xs: np.asarray(xs, dtype=np.int64))
    change = data.draw(
        st.fixed_dictionaries(
            {},
            optional={
                "mem": sizes,
                "workspace": sizes,
                "cost": sizes.map(lambda a: a.astype(np.float64)),
                "seconds": st.one_of(st.none(), sizes.map(lambda a: a * 1e-3)),
                "fixed_mem": st.integers(0, 100),
                "name": st.text(min_size=1, max_size=5),
                "meta": st.just({"dims": {"batch": 2}}),
            },
        )
    )
    new = g.with_arrays(**change)
    same_graph(new, _written_out(g, **change))
    require_valid(new, store_all_schedule(new)[0])
    same_graph(g.with_arrays(), g)  # nothing changed: the same graph


def test_with_arrays_keeps_what_is_not_named_and_checks_what_is() -> None:
    g = checkmate_training_graph(generators.unet(2, base_mem=1 << 10))
    g = g.with_arrays(seconds=g.cost * 1e-6, fixed_mem=1 << 20, meta={"k": 1})
    unit = g.with_arrays(mem=np.ones(g.n, dtype=np.int64), workspace=np.zeros(g.n, dtype=np.int64), fixed_mem=0)
    assert unit.lb == 1 + int(np.diff(unit.pred_ptr).max()) and unit.targets.tolist() == g.targets.tolist()
    assert unit.seconds is not None and np.array_equal(unit.seconds, g.seconds) and unit.meta == {"k": 1}
    assert g.with_arrays(targets=[int(g.targets[0])]).targets.tolist() == [int(g.targets[0])]
    with pytest.raises(InputError, match="negative"):
        g.with_arrays(mem=-np.ones(g.n, dtype=np.int64))
    with pytest.raises(TypeError, match="src and dst"):
        g.with_arrays(src=np.zeros(0, dtype=np.int64))
    with pytest.raises(TypeError, match="not a part"):
        g.with_arrays(lb=0)
