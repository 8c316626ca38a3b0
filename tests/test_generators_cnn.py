"""The CNN-shaped generators (ResNet, MobileNet, VGG, FCN, SegNet, U-Net): shapes the quality
benchmark relies on, and plans on their training graphs that replay within budget."""

from __future__ import annotations

import pytest

from remat_cli import generators as G
from remat_cli.errors import NoPlanError
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.training import checkmate_training_graph

SMALL = {
    "resnet": lambda: G.resnet((1, 1), batch=1, side=32, width=8),
    "mobilenet": lambda: G.mobilenet(((1, 8, 1, 1), (4, 16, 2, 2)), batch=1, side=32),
    "vgg": lambda: G.vgg((1, 1, 2), batch=1, side=32, width=8),
    "fcn": lambda: G.fcn((1, 1, 1), batch=1, side=32, width=8),
    "segnet": lambda: G.segnet((1, 1, 2), batch=1, side=32, width=8),
    "unet": lambda: G.unet_cnn(2, batch=1, side=32, width=8),
}


def test_sizes_halve_at_each_pooling() -> None:
    g = G.vgg((2, 2, 3, 3, 3), batch=8, side=224)
    pools = [v for v in range(g.n) if g.ops[v] == "MaxPool"]
    sizes = [int(g.mem[v]) for v in pools]
    assert sizes[0] == 8 * 64 * 112 * 112 * 4  # batch × channels × side² × fp32
    assert all(b * 2 == a for a, b in zip(sizes[:4], sizes[1:4]))  # channels ×2, area ÷4
    u = G.unet_cnn(4, batch=1, side=64, width=4)
    concat = [int(u.mem[v]) for v in range(u.n) if u.ops[v] == "Concat"]
    assert concat == sorted(concat) and all(b == 2 * a for a, b in zip(concat, concat[1:]))


def test_skip_edges_exist() -> None:
    """Residual adds, U-Net concats, SegNet unpooling and FCN score adds read two values (the
    deepest SegNet unpooling reads the pool right before it, one value)."""
    for make, op in ((SMALL["resnet"], "Add"), (SMALL["unet"], "Concat"), (SMALL["segnet"], "MaxUnpool"), (SMALL["fcn"], "Add")):
        g = make()
        joins = [v for v in range(g.n) if g.ops[v] == op]
        assert joins and sum(len(g.preds(v)) == 2 for v in joins) >= len(joins) - (op == "MaxUnpool")


@pytest.mark.parametrize("name", sorted(SMALL))
def test_training_graphs_plan_within_budget(name: str) -> None:
    g = checkmate_training_graph(SMALL[name]())
    budget = int(0.8 * store_all_peak(g))
    budget = max(budget, g.lb)
    for strategy in ("treewidth", "auto"):
        try:
            plan = make_plan(g, strategy, budget, {})  # replayed by the simulator
        except NoPlanError as exc:  # allowed only with a true smallest budget above this one
            assert exc.min_budget is not None and exc.min_budget > budget
            assert make_plan(g, strategy, exc.min_budget, {}).metrics.peak_bytes <= exc.min_budget
            continue
        assert plan.metrics.peak_bytes <= budget
        assert plan.metrics.cost >= g.base_cost
