"""The view-folding pass (remat_cli.loaders.views): what folds, into what, and that the
folded graph is the kept-views graph with its view nodes contracted."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

from _onnx_models import init, load, model, preds, save, tensor

from remat_cli.loaders.views import ReadOp, fold_views
from remat_cli.simulate import require_valid
from remat_cli.strategies.store_all import store_all_schedule
from remat_cli.units import from_data, say


def _said(graph, key: str) -> str:
    """The ``remat info`` line ``key`` of ``graph`` (its meta holds facts, rendered here)."""
    return str(say(from_data(graph.meta["info"][key])))


def _op(op, ins, outs, scheduled=True, default=True):
    return ReadOp(op=op, default=default, inputs=tuple(ins), outputs=tuple(outs), scheduled=scheduled)


def test_chains_of_views_resolve_to_the_scheduled_base():
    ops = [
        _op("MatMul", ["x", "W"], ["a"]),
        _op("Reshape", ["a", "shape"], ["a2"]),
        _op("Unsqueeze", ["a2", "axes"], ["a3"]),
        _op("Relu", ["a3"], ["r"]),
        _op("Identity", ["r"], ["r2"]),
    ]
    f = fold_views(ops, {"W"})
    assert f.folded == {1, 2, 4} and f.count == 3
    assert dict(f.base) == {"a2": "a", "a3": "a", "r2": "r"} and not f.root


def test_views_of_fixed_values_and_transposed_parameters_are_those_values():
    ops = [
        _op("Reshape", ["W", "shape"], ["w2"]),
        _op("Transpose", ["w2"], ["wt"]),  # a parameter seen through a view, transposed: still W
        _op("Flatten", ["x"], ["xf"]),  # a view of a model input
        _op("Shape", ["x"], ["s"], scheduled=False),  # computed at load time
        _op("Squeeze", ["s"], ["s2"]),
        _op("Transpose", ["C"], ["ct"]),  # a constant that is no parameter: a copy, kept
        _op("MatMul", ["xf", "wt"], ["y"]),
        _op("Transpose", ["y"], ["yt"]),  # an activation's transpose is a copy
    ]
    f = fold_views(ops, {"W"})
    assert f.folded == {0, 1, 2, 4}
    assert dict(f.root) == {"w2": "W", "wt": "W", "xf": "x", "s2": "s"} and not f.base


def test_nothing_folds_with_keep_views_or_outside_the_default_domain():
    ops = [_op("Relu", ["x"], ["a"]), _op("Reshape", ["a", "s"], ["b"]), _op("Transpose", ["W"], ["wt"])]
    assert fold_views(ops, {"W"}, keep_views=True).count == 0
    custom = [ops[0], _op("Reshape", ["a", "s"], ["b"], default=False), _op("Identity", ["", "s"], ["c"])]
    assert fold_views(custom, {"W"}).count == 0  # a custom domain's op, a view of an absent input


# -------------------------------------------------------------------- on real ONNX files
_KINDS = ["relu", "add", "matmul", "matmul_t", "reshape", "identity", "transpose"]
_VIEWS = {"reshape", "identity"}


def _random_model(steps: list[tuple[str, int, int]]):
    """A model of square [4, 4] values: each step reads earlier values (by index) with one
    op; ``matmul_t`` multiplies by the transpose of a parameter, read through an Identity."""
    values, nodes, inits, views = ["x"], [], [init("shape", (2,), np.int64, [4, 4])], set()
    for i, (kind, a, b) in enumerate(steps):
        x, y, out, name = values[a % len(values)], values[b % len(values)], f"v{i}", f"n{i}"
        if kind == "relu":
            nodes.append(helper.make_node("Relu", [x], [out], name=name))
        elif kind == "add":
            nodes.append(helper.make_node("Add", [x, y], [out], name=name))
        elif kind == "matmul":
            inits.append(init(f"W{i}", (4, 4)))
            nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [out], name=name))
        elif kind == "matmul_t":
            inits.append(init(f"W{i}", (4, 4)))
            nodes.append(helper.make_node("Identity", [f"W{i}"], [f"W{i}v"], name=f"{name}_id"))
            nodes.append(helper.make_node("Transpose", [f"W{i}v"], [f"W{i}t"], name=f"{name}_t", perm=[1, 0]))
            nodes.append(helper.make_node("MatMul", [x, f"W{i}t"], [out], name=name))
            views.update({f"{name}_id", f"{name}_t"})
        elif kind == "transpose":
            nodes.append(helper.make_node("Transpose", [x], [out], name=name, perm=[1, 0]))
        else:
            inputs = [x, "shape"] if kind == "reshape" else [x]
            nodes.append(helper.make_node(kind.capitalize(), inputs, [out], name=name))
            views.add(name)
        values.append(out)
    nodes.append(helper.make_node("Sum", values[1:], ["out"], name="last"))  # depends on every step
    return model(nodes, [tensor("x", [4, 4])], [tensor("out", [4, 4])], inits), views


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(_KINDS), st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=10))
def test_folding_contracts_the_view_nodes_of_the_kept_graph(tmp_path, steps):
    m, views = _random_model(steps)
    path = save(m, tmp_path)
    folded = load(path, training=False)
    kept = load(path, training=False, keep_views=True)
    removed = [v for v in kept.ids if v not in folded.index]
    # exactly the view nodes go, the others keep their order and sizes
    assert set(removed) == views and [v for v in kept.ids if v not in views] == list(folded.ids)
    assert all(folded.mem[folded.index[v]] == kept.mem[kept.index[v]] for v in folded.ids)
    assert _said(folded, "folded").startswith(f"{len(views)} views")

    def bases(v: str) -> set[str]:  # v's inputs in the kept graph, through view nodes
        found = set()
        for u in preds(kept, v):
            found |= bases(u) if u in views else {u}
        return found

    for v in folded.ids:
        assert preds(folded, v) == bases(v)
    for g in (folded, kept, load(path), load(path, keep_views=True)):
        require_valid(g, store_all_schedule(g)[0])
