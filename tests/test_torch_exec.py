"""The executor's fast paths and the CUDA measuring path (issue 13).

The executor calls a one-op graph's autograd nodes directly instead of starting the
engine (``_walk_grad``); these tests hold it to ``torch.autograd.grad`` on ops whose
gradients need the engine's fitting (a bias broadcast back to its shape, a view of a
parameter, an input used twice). The CUDA branch of ``measure`` cannot run here (no
GPU): it is driven through a fake ``torch.cuda`` memory API so that its arithmetic and
its synchronisation are exercised.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from remat_cli.planner import make_plan  # noqa: E402
from remat_cli.simulate import simulate  # noqa: E402
from remat_cli.torch import measure  # noqa: E402
from remat_cli.torch._apply import Step  # noqa: E402
from remat_cli.torch._capture import capture_program  # noqa: E402
from remat_cli.torch._measure import paired_seconds  # noqa: E402
from remat_cli.torch._runtime import _edge, _is_simple_tree, _walk_grad  # noqa: E402
from remat_cli.torch.fidelity import captured_step, eager_step  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
import cnn  # noqa: E402
import mlp  # noqa: E402

sys.path.remove(str(EXAMPLES))

aten = torch.ops.aten


def _leaf(*shape):
    return torch.randn(*shape).requires_grad_(True)


CASES = {
    # bias [4] broadcast into an [8, 4] output: the node returns [8, 4], the leaf wants [4]
    "addmm+permute": lambda: (
        lambda b, x, w: aten.addmm.default(b, x, aten.permute.default(w, [1, 0])),
        [_leaf(4), _leaf(8, 3), _leaf(4, 3)],
    ),
    "mul broadcast": lambda: (lambda a, b: aten.mul.Tensor(a, b), [_leaf(5, 6), _leaf(6)]),
    "same input twice": lambda: (lambda a: aten.mul.Tensor(a, a), [_leaf(3, 3)]),
    "relu": lambda: (lambda a: aten.relu.default(a), [_leaf(7)]),
    "mean": lambda: (lambda a: aten.mean.default(a), [_leaf(2, 5)]),
    "expand view": lambda: (lambda a, b: aten.add.Tensor(aten.expand.default(a, [4, 3]), b), [_leaf(1, 3), _leaf(4, 3)]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_direct_gradients_equal_the_engines(case):
    torch.manual_seed(0)
    fn, leaves = CASES[case]()
    out = fn(*leaves)
    grad = torch.randn_like(out)
    edge = _edge(out)
    assert _is_simple_tree(edge), case
    want = torch.autograd.grad([out], leaves, [grad], retain_graph=True, allow_unused=True)
    expect: list = []

    def walk():
        produced: dict = {}
        _walk_grad(edge.node, grad, {}, {id(t): ((i,), t) for i, t in enumerate(leaves)}, produced, {}, expect)
        return [produced.get((i,)) for i in range(len(leaves))]

    for w, g in zip(want, walk()):
        assert g is not None and g.shape == w.shape and torch.allclose(g, w), case
    again = walk()  # reads what the first call cached
    assert all(torch.allclose(a, w) for a, w in zip(again, want))


def test_shared_multi_output_views_use_the_engine():
    x = _leaf(4, 6)
    parts = aten.split.Tensor(x, 3, 1)
    y = aten.mul.Tensor(parts[0], parts[1])  # two outputs of one split node: not a tree
    assert not _is_simple_tree(_edge(y))


@pytest.fixture(scope="module")
def small_mlp():
    model, inputs, loss_fn = mlp.make(batch=8, width=16, depth=3)
    graph, prog = capture_program(model, inputs, loss_fn, timing_runs=0)
    return model, inputs, loss_fn, graph, prog


def _grads(step, model, inputs):
    for p in model.parameters():
        if p.grad is not None:
            p.grad.zero_()
    step(*inputs)
    return [p.grad.detach().clone() for p in model.parameters()]


def test_store_all_and_recomputing_plans_keep_eager_gradients(small_mlp):
    """Gradients through the fast executor equal eager training's, for store-all and for
    a plan at the lower bound (which recomputes), several steps in a row (the per-op
    caches are filled by the first)."""
    model, inputs, loss_fn, graph, prog = small_mlp
    reference = _grads(eager_step(model, loss_fn), model, inputs)
    for strategy, budget in (("store-all", None), ("chain-dp", graph.lb)):
        plan = make_plan(graph, strategy, budget)
        assert simulate(graph, plan.schedule).valid
        step = Step(prog, graph, plan.schedule, strategy, inputs)
        for _ in range(3):
            got = _grads(step, model, inputs)
            assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(got, reference)), strategy
        assert step.fallbacks == 0


@pytest.mark.parametrize("make", [lambda: mlp.make(batch=8, width=16, depth=3), lambda: cnn.make(batch=2, size=8)])
def test_captured_program_under_autograd_is_the_eager_step(make):
    """``captured_step`` (the benchmark's reference for the executor's own share: the
    captured program, PyTorch's engine) computes eager training's loss and gradients;
    the CNN's program also returns BatchNorm's buffer updates, which it must skip over."""
    model, inputs, loss_fn = make()
    _graph, prog = capture_program(model, inputs, loss_fn, timing_runs=0)
    reference = _grads(eager_step(model, loss_fn), model, inputs)
    want = eager_step(model, loss_fn)(*inputs)  # training mode: the running stats are not read
    step = captured_step(prog)
    got = _grads(step, model, inputs)
    assert torch.allclose(step(*inputs), want, rtol=1e-5)
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(got, reference))


class FakeCuda:
    """torch.cuda's memory and synchronisation calls, recorded; the allocator says its
    peak is ``base + extra`` bytes."""

    def __init__(self, base: int, extra: int) -> None:
        self.base, self.extra = base, extra
        self.calls: list[str] = []

    def install(self, monkeypatch) -> None:
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: self.calls.append("sync"))
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: self.calls.append("reset"))
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: self.base)
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: self.calls.append("max") or self.base + self.extra)


def test_cuda_measure_path_reads_the_allocator(small_mlp, monkeypatch):
    """With ``device="cuda"`` the peak is the allocator's peak over the tracked step (less
    what was allocated before it) plus fixed memory; FLOPs still come from the tracker;
    every timed step is bracketed by synchronisations."""
    model, inputs, _loss, graph, prog = small_mlp
    plan = make_plan(graph, "store-all")
    step = Step(prog, graph, plan.schedule, "store-all", inputs)
    cpu = measure(step, inputs, runs=1)
    fake = FakeCuda(base=1 << 20, extra=12345)
    fake.install(monkeypatch)
    runs = 3
    m = measure(step, inputs, runs=runs, device="cuda")
    assert m.method == "cuda allocator" and m.device == "cuda"
    assert m.peak_bytes == 12345 + m.fixed_bytes and m.fixed_bytes == cpu.fixed_bytes == graph.fixed_mem
    assert m.flops == cpu.flops == plan.metrics.cost
    assert fake.calls[:2] == ["sync", "reset"] and fake.calls.count("max") == 1
    assert fake.calls.count("sync") == 2 + 2 * runs
    fake.calls.clear()
    pair = paired_seconds(step, step, inputs, pairs=4, device="cuda")
    assert pair.pairs == 4 and fake.calls.count("sync") == 2 * 2 * 4
    assert pair.seconds > 0 and pair.reference_seconds > 0 and pair.ratio > 0


def test_paired_ratio_and_its_quartiles(monkeypatch):
    """The overhead figure is the median of the pairs' time ratios and comes with their
    quartiles; driven by a fake clock, so this checks the arithmetic, not a timing."""
    import remat_cli.torch._measure as measure_mod

    clock = [0.0]
    monkeypatch.setattr(measure_mod, "now", lambda: clock[0])
    durations = iter([1.0, 1.5, 1.0, 1.0, 1.0, 3.0, 1.2, 1.0, 1.0, 1.1])  # reference always 1 s

    def tick(*_inputs):
        clock[0] += next(durations)

    # pairs alternate their order: reference first in even pairs, the step first in odd ones
    pair = paired_seconds(tick, tick, (), pairs=5, device="cpu")
    ratios = sorted([1.5, 1.0, 3.0, 1.2, 1.1])
    assert pair.pairs == 5 and pair.ratio == pytest.approx(1.2)
    q1, q3 = pair.ratio_quartiles
    assert q1 <= pair.ratio <= q3 and ratios[0] <= q1 and q3 <= ratios[-1]
    assert (q1, q3) == pytest.approx((1.05, 2.25))
