"""The PyTorch bridge: capture, apply, measure, fidelity (DESIGN §7).

Tiny models (an MLP chain, a residual CNN with BatchNorm, a transformer block with
dropout); each is captured once. Every plan comes from ``make_plan`` (so it passed the
simulator); gradients are compared with plain eager training.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from remat_cli.cli import cli  # noqa: E402
from remat_cli.errors import InputError, NoPlanError  # noqa: E402
from remat_cli.planner import make_plan  # noqa: E402
from remat_cli.plandoc import plan_to_json  # noqa: E402
from remat_cli.simulate import simulate  # noqa: E402
from remat_cli.torch import apply, measure  # noqa: E402
from remat_cli.torch._apply import Step  # noqa: E402
from remat_cli.schedule import Schedule  # noqa: E402
from remat_cli.torch._capture import PARAMS, capture_program  # noqa: E402
from remat_cli.torch.fidelity import eager_step  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
import cnn  # noqa: E402
import mlp  # noqa: E402
import transformer  # noqa: E402

sys.path.remove(str(EXAMPLES))


def tiny_mlp():
    return mlp.make(batch=8, width=16, depth=4)


def tiny_cnn():
    torch.manual_seed(0)
    model = cnn.ResNet(c=4, blocks=2, classes=3)
    labels = torch.tensor([0, 2])
    return model, (torch.randn(2, 3, 8, 8),), lambda out: torch.nn.functional.cross_entropy(out, labels)


def tiny_transformer():
    return transformer.make(batch=2, seq=8, d=16, heads=2, depth=1)


FACTORIES = {"mlp": tiny_mlp, "cnn": tiny_cnn, "transformer": tiny_transformer}


@pytest.fixture(scope="module")
def captured():
    """name -> (model, inputs, loss_fn, graph, program), each captured once."""
    out = {}
    for name, make in FACTORIES.items():
        model, inputs, *rest = make()
        loss_fn = rest[0] if rest else None
        graph, prog = capture_program(model, inputs, loss_fn, timing_runs=1)
        out[name] = (model, inputs, loss_fn, graph, prog)
    return out


def _grads(step, model, inputs, seed=0):
    for p in model.parameters():
        p.grad = None if p.grad is None else p.grad.zero_()
    torch.manual_seed(seed)
    step(*inputs)
    return [p.grad.detach().clone() for p in model.parameters()]


def _equal(a, b):
    return all(torch.allclose(x, y, rtol=1e-4, atol=1e-6) for x, y in zip(a, b))


def _smallest(graph, strategy):
    """The plan at the lower bound, or at the smallest budget the strategy meets."""
    try:
        return make_plan(graph, strategy, graph.lb)
    except NoPlanError as exc:
        return make_plan(graph, strategy, exc.min_budget)


def _budgets(graph, store_all_peak, fractions=(1.0, 0.7, 0.4, 0.0)):
    """Budgets from the store-all peak down to the lower bound."""
    return [int(graph.lb + f * (store_all_peak - graph.lb)) for f in fractions]


# ---------------------------------------------------------------- capture
def test_capture_graph_is_a_training_graph_with_fixed_memory(captured):
    model, inputs, _loss, graph, _prog = captured["mlp"]
    assert graph.is_training and graph.cost_unit == "FLOP"
    assert {"forward", "loss", "backward"} <= set(graph.kinds)
    params = sum(p.numel() * 4 for p in model.parameters())
    # parameters + their gradients + the input are fixed memory
    assert graph.fixed_mem == 2 * params + inputs[0].numel() * 4
    i = graph.index
    # an addmm's gradient step reads its input activation (what autograd saves), a relu's its output
    assert "relu" in graph.ids and "addmm_1" in graph.ids
    assert graph.ids[graph.preds(i["bwd:addmm_1"])[-1]] == "relu"
    assert "relu" in [graph.ids[u] for u in graph.preds(i["bwd:relu"])]
    prov = graph.meta["torch"]
    assert prov["torch"] == torch.__version__ and prov["inputs"] == [{"shape": [8, 16], "dtype": "float32"}]


def test_views_share_their_base(captured):
    """The transformer's q/k/v are views (split, view, transpose) of one qkv matmul: no
    node of their own, and whoever saves them reads the base."""
    _m, _x, _l, graph, _prog = captured["transformer"]
    ops = set(graph.ops)
    assert not any(op.startswith(("view.", "split", "transpose", "permute", "t.")) for op in ops), ops
    bmm = [v for v in range(graph.n) if graph.ops[v].startswith("bmm") and graph.kinds[v] == "forward"]
    assert bmm and all(graph.mem[v] > 0 for v in bmm)


def test_batchnorm_statistics_are_a_node_of_their_own(captured):
    """A training BatchNorm is one op with five outputs; its gradient step reads only the
    small saved mean and inverse std. Those are node ``X.stats`` (a copy), so the plan can
    free the normalized output after its forward readers, and store-all peaks where eager
    PyTorch does instead of holding every BatchNorm's output until the backward pass."""
    model, inputs, loss_fn, graph, prog = captured["cnn"]
    i = graph.index
    norms = [v for v in range(graph.n) if graph.ops[v].startswith("_native_batch_norm_legit_functional")]
    norms = [v for v in norms if graph.kinds[v] == "forward" and not graph.ids[v].endswith(".stats")]
    assert len(norms) == 4
    for v in norms:
        x = graph.ids[v]
        bwd = [graph.ids[u] for u in graph.preds(i["bwd:" + x])]
        assert x + ".stats" in bwd and x not in bwd, bwd
        s = i[x + ".stats"]
        assert list(graph.preds(s)) == [v] and 0 < graph.mem[s] * 8 < graph.mem[v]
    store_all = make_plan(graph, "store-all")
    step = Step(prog, graph, store_all.schedule, "store-all", inputs)
    m = measure(step, inputs, runs=1)
    assert m.fallbacks == 0 and abs(m.peak_bytes / store_all.metrics.peak_bytes - 1) <= 0.01
    eager = measure(eager_step(model, loss_fn), inputs, runs=1, fixed=step.fixed_tensors())
    # with the normalized outputs held until backward, store-all was ~1.4x eager's peak
    assert store_all.metrics.peak_bytes <= eager.peak_bytes * 1.05, (store_all.metrics.peak_bytes, eager.peak_bytes)


def test_dropout_mask_is_a_node_of_its_own(captured):
    """Dropout's gradient step reads only its mask (one byte an element): ``X.stats``."""
    _m, _x, _l, graph, _prog = captured["transformer"]
    i = graph.index
    drops = [x for x in graph.ids if x.startswith("native_dropout") and not x.endswith(".stats")]
    assert drops
    for x in drops:
        assert [graph.ids[u] for u in graph.preds(i["bwd:" + x])][-1] == x + ".stats"
        assert 0 < graph.mem[i[x + ".stats"]] * 4 <= graph.mem[i[x]]


# ---------------------------------------------------------------- apply
@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_gradients_equal_eager_at_several_budgets(captured, name):
    model, inputs, loss_fn, graph, prog = captured[name]
    reference = _grads(eager_step(model, loss_fn), model, inputs)
    store_all = make_plan(graph, "store-all")
    tried = 0
    for strategy in ("store-all", "chain-dp", "dtr", "treewidth"):
        for budget in _budgets(graph, store_all.metrics.peak_bytes):
            try:
                plan = make_plan(graph, strategy, budget, reference_peak=store_all.metrics.peak_bytes)
            except NoPlanError:
                continue
            assert simulate(graph, plan.schedule).valid
            step = Step(prog, graph, plan.schedule, strategy, inputs)
            got = _grads(step, model, inputs)
            assert _equal(got, reference), (name, strategy, budget)
            tried += 1
            if strategy == "store-all":
                break
    assert tried >= 4


def test_dropout_recomputes_identically(captured):
    """A plan that recomputes the transformer's dropout still gives eager's gradients."""
    model, inputs, loss_fn, graph, prog = captured["transformer"]
    reference = _grads(eager_step(model, loss_fn), model, inputs, seed=3)
    drop = {v for v in range(graph.n) if graph.ops[v].startswith("native_dropout")}
    assert drop
    plan = _smallest(graph, "dtr")
    counts = torch.bincount(torch.as_tensor(plan.schedule.compute_nodes.astype("int64")), minlength=graph.n)
    assert any(int(counts[v]) > 1 for v in drop), "the plan should recompute a dropout"
    step = Step(prog, graph, plan.schedule, "dtr", inputs)
    assert _equal(_grads(step, model, inputs, seed=3), reference)
    assert step.fallbacks == 0


def test_batchnorm_running_stats_update_like_eager(captured):
    model, inputs, loss_fn, graph, prog = captured["cnn"]
    before = {k: b.clone() for k, b in model.named_buffers()}
    eager_step(model, loss_fn)(*inputs)
    eager_after = {k: b.clone() for k, b in model.named_buffers()}
    with torch.no_grad():
        for k, b in model.named_buffers():
            b.copy_(before[k])
    plan = _smallest(graph, "dtr")
    Step(prog, graph, plan.schedule, "dtr", inputs)(*inputs)
    for k, b in model.named_buffers():
        assert torch.allclose(b.float(), eager_after[k].float(), rtol=1e-5, atol=1e-7), k


# ---------------------------------------------------------------- measure
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(strategy=st.sampled_from(["chain-dp", "dtr", "greedy"]), frac=st.floats(0.0, 1.0))
def test_measured_peak_matches_prediction_on_the_mlp(captured, strategy, frac):
    """On the chain, the executor follows the plan exactly: no fallbacks, the same FLOPs,
    and the storage-tracked peak within 5% of the simulator's."""
    model, inputs, _loss, graph, prog = captured["mlp"]
    store_all = make_plan(graph, "store-all")
    budget = int(graph.lb + frac * (store_all.metrics.peak_bytes - graph.lb))
    try:
        plan = make_plan(graph, strategy, budget, reference_peak=store_all.metrics.peak_bytes)
    except NoPlanError:
        return
    step = Step(prog, graph, plan.schedule, strategy, inputs)
    m = measure(step, inputs, runs=1)
    assert m.fallbacks == 0
    assert m.fixed_bytes == graph.fixed_mem
    assert abs(m.peak_bytes / plan.metrics.peak_bytes - 1) <= 0.05, (m.peak_bytes, plan.metrics.peak_bytes)
    assert m.flops == pytest.approx(plan.metrics.cost, rel=1e-9)


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_measured_peak_within_tolerance(captured, name):
    model, inputs, _loss, graph, prog = captured[name]
    store_all = make_plan(graph, "store-all")
    for plan in (store_all, _smallest(graph, "dtr"), _smallest(graph, "chain-dp")):
        step = Step(prog, graph, plan.schedule, plan.strategy, inputs)
        m = measure(step, inputs, runs=1)
        assert abs(m.peak_bytes / plan.metrics.peak_bytes - 1) <= 0.05, (name, plan.strategy)
        # BatchNorm's num_batches_tracked += 1 runs outside the plan (a few FLOPs more);
        # a recomputed gradient step costs what bwd:X says (bwd:X.params is done once)
        assert plan.metrics.cost <= m.flops <= plan.metrics.cost * (1 + 1e-3), (name, plan.strategy)
        assert m.fallbacks == 0


def _recompute_gradient_steps(graph, schedule, picks):
    """``schedule`` with ``free bwd:X; compute bwd:X`` inserted right after the first
    computation of each gradient step ``picks`` chooses among those with parameters."""
    split = sorted(graph.ids[v][: -len(PARAMS)] for v in range(graph.n) if graph.ids[v].endswith(PARAMS))
    chosen = {x for k, x in enumerate(split) if picks[k % len(picks)]}
    out, done = [], set()
    for op, node in schedule.named(graph.ids):
        out.append([op, node])
        if op == "compute" and node in chosen and node not in done:
            done.add(node)
            out += [["free", node], ["compute", node]]
    return Schedule.from_named(out, graph.index), len(done)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(FACTORIES)), picks=st.lists(st.booleans(), min_size=1, max_size=6))
def test_recomputed_gradient_steps_cost_what_the_graph_says(captured, name, picks):
    """A gradient step with parameters is bwd:X (what its recomputation does: input
    gradients only) plus bwd:X.params (parameter gradients, done once): a schedule that
    recomputes gradient steps predicts the FLOPs the executor counts, with eager's
    gradients, no fallbacks and the simulated peak."""
    model, inputs, loss_fn, graph, prog = captured[name]
    assert any(i.endswith(PARAMS) for i in graph.ids)
    schedule, recomputed = _recompute_gradient_steps(graph, make_plan(graph, "store-all").schedule, picks)
    sim = simulate(graph, schedule)
    assert sim.error is None, sim.error
    step = Step(prog, graph, schedule, "hand-made", inputs)
    m = measure(step, inputs, runs=1)
    assert m.fallbacks == 0
    # BatchNorm's num_batches_tracked += 1 runs outside the plan: a few FLOPs more
    assert sim.metrics.cost <= m.flops <= sim.metrics.cost * (1 + 1e-3), (m.flops, sim.metrics.cost)
    assert sim.metrics.recomputations == recomputed
    # the tiny CNN's store-all step already measures a few bytes above its prediction
    assert abs(m.peak_bytes / sim.metrics.peak_bytes - 1) <= 1e-3, (m.peak_bytes, sim.metrics.peak_bytes)
    assert _equal(_grads(step, model, inputs), _grads(eager_step(model, loss_fn), model, inputs))


def test_gradient_step_split_keeps_the_total_cost(captured):
    """bwd:X + bwd:X.params cost what the whole gradient step measured: the store-all
    step's FLOPs are the graph's base cost."""
    model, inputs, _loss, graph, prog = captured["transformer"]
    store_all = make_plan(graph, "store-all")
    for v in range(graph.n):
        if graph.ids[v].endswith(PARAMS):
            assert graph.mem[v] == 0 and graph.workspace[v] == 0
            assert [graph.ids[u] for u in graph.pred_lists[v]] == [graph.ids[v][: -len(PARAMS)]]
    m = measure(Step(prog, graph, store_all.schedule, "store-all", inputs), inputs, runs=1)
    assert m.flops == pytest.approx(store_all.metrics.base_cost, rel=1e-12)


def test_plan_without_param_steps_still_applies(captured):
    """A plan made before gradient steps were split (no bwd:X.params steps) applies: the
    steps are added after the first bwd:X, with eager's gradients."""
    model, inputs, loss_fn, graph, _prog = captured["mlp"]
    plan = json.loads(json.dumps(plan_to_json(_smallest(graph, "dtr"))))
    plan["schedule"] = [s for s in plan["schedule"] if not s[1].endswith(PARAMS)]
    step = apply(model, plan, inputs, loss_fn)
    assert _equal(_grads(step, model, inputs), _grads(eager_step(model, loss_fn), model, inputs))
    assert step.fallbacks == 0


# ---------------------------------------------------------------- fused runs
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(sorted(FACTORIES)),
    strategy=st.sampled_from(["store-all", "chain-dp", "dtr", "treewidth"]),
    frac=st.sampled_from([1.0, 0.5, 0.0]),
)
def test_fused_runs_keep_the_one_op_executors_peak_and_gradients(captured, name, strategy, frac):
    """Fused runs (one autograd graph across consecutive ops, autograd holding what they
    save) change nothing a plan promises: the same measured peak, to the byte, as running
    every op as a one-op graph, the same FLOPs, no fallbacks, and eager's gradients."""
    model, inputs, loss_fn, graph, prog = captured[name]
    store_all = make_plan(graph, "store-all")
    budget = None if strategy == "store-all" else int(graph.lb + frac * (store_all.metrics.peak_bytes - graph.lb))
    try:
        plan = make_plan(graph, strategy, budget, reference_peak=store_all.metrics.peak_bytes)
    except NoPlanError:
        return
    assert simulate(graph, plan.schedule).valid
    fused = Step(prog, graph, plan.schedule, strategy, inputs)
    one_op = Step(prog, graph, plan.schedule, strategy, inputs, fuse=False)
    assert fused.fused and not one_op.fused
    a, b = measure(fused, inputs, runs=1), measure(one_op, inputs, runs=1)
    assert a.peak_bytes == b.peak_bytes, (name, strategy, frac)
    assert a.flops == b.flops and a.fallbacks == b.fallbacks == 0
    reference = _grads(eager_step(model, loss_fn), model, inputs)
    assert _equal(_grads(fused, model, inputs), reference), (name, strategy, frac)


def test_fused_paths_are_all_taken(captured):
    """The transformer's attention gives fused ops whose autograd graph is not a tree (run
    through the engine); a plan at the lower bound records some ops at a recomputation
    after a first computation without autograd, and frees some saved values between an
    op's recording and its gradient step (those are saved as handles), and records a
    layer norm after such a first computation: all are exercised."""
    from remat_cli.torch._apply import _PLAIN

    model, inputs, loss_fn, graph, prog = captured["transformer"]
    plan = _smallest(graph, "chain-dp")
    step = Step(prog, graph, plan.schedule, "chain-dp", inputs)
    assert any(what == _PLAIN for what, _ in step._program)
    # a layer norm (several outputs, an X.stats node) computed without autograd first
    assert any(what == _PLAIN and node + ".stats" in graph.index for what, node in step._program)
    m_model, m_inputs, m_loss, m_graph, m_prog = captured["mlp"]
    m_plan = _smallest(m_graph, "chain-dp")
    m_step = Step(m_prog, m_graph, m_plan.schedule, "chain-dp", m_inputs)
    held = [saves is not None for saves, _k in m_step.fused.values()]
    assert any(held) and not all(held)
    assert _equal(_grads(m_step, m_model, m_inputs), _grads(eager_step(m_model, m_loss), m_model, m_inputs))
    reference = _grads(eager_step(model, loss_fn), model, inputs)
    assert _equal(_grads(step, model, inputs), reference)
    trees = prog.__dict__["_fused_trees"]
    assert any(trees.values()) and not all(trees.values())


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_norms_and_dropout_run_fused(captured, name):
    """BatchNorm, LayerNorm and dropout (several outputs, statistics in an ``X.stats``
    node) run inside fused runs too: under store-all every one of them is fused, with its
    saved statistics as handles read from ``X.stats``; the step keeps eager's gradients
    (the same dropout draws) and BatchNorm's running statistics."""
    model, inputs, loss_fn, graph, prog = captured[name]
    owners = {k[: -len(".stats")] for k in graph.ids if k.endswith(".stats")}
    plan = make_plan(graph, "store-all")
    step = Step(prog, graph, plan.schedule, "store-all", inputs)
    assert owners and owners <= set(step.fused)
    assert all(step.fused[o][0] is None for o in owners)  # saved tensors are handles
    before = {k: b.clone() for k, b in model.named_buffers()}
    reference = _grads(eager_step(model, loss_fn), model, inputs, seed=5)
    eager_after = {k: b.clone() for k, b in model.named_buffers()}
    with torch.no_grad():
        for k, b in model.named_buffers():
            b.copy_(before[k])
    assert _equal(_grads(step, model, inputs, seed=5), reference)
    assert step.fallbacks == 0
    for k, b in model.named_buffers():
        assert torch.allclose(b.float(), eager_after[k].float(), rtol=1e-5, atol=1e-7), k


# ---------------------------------------------------------------- provenance and refusals
def test_plan_from_another_input_shape_is_refused(captured, tmp_path):
    model, inputs, loss_fn, graph, _prog = captured["mlp"]
    plan = make_plan(graph, "chain-dp", graph.lb + (make_plan(graph, "store-all").metrics.peak_bytes - graph.lb) // 2)
    doc = plan_to_json(plan)
    assert doc["provenance"]["inputs"] == [{"shape": [8, 16], "dtype": "float32"}]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"inputs \[float32\[8, 16\]\] \(plan\) vs \[float32\[4, 16\]\]"):
        apply(model, str(path), (torch.randn(4, 16),), loss_fn)


def test_data_dependent_control_flow_is_refused():
    class Branchy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x)
            return y * 2 if y.sum() > 0 else y

    with pytest.raises(InputError, match="torch.export cannot capture"):
        capture_program(Branchy(), (torch.randn(2, 4),))


# ---------------------------------------------------------------- command line
FACTORY = """
import torch
from torch import nn

def make():
    torch.manual_seed(0)
    layers = [m for _ in range(4) for m in (nn.Linear(16, 16), nn.ReLU())]
    model = nn.Sequential(*layers, nn.Linear(16, 4))
    return model, (torch.randn(128, 16),), lambda out: out.pow(2).mean()

def broken():
    return 42
"""


def test_cli_capture_line_writes_the_output_name_as_it_is(tmp_path):
    """The "captured" line prints a file name with an escape sequence and an emoji code
    written out, as every other line with a name: no raw ESC reaches the terminal."""
    factory = tmp_path / "model.py"
    factory.write_text(FACTORY)
    out = tmp_path / "g\x1b[31m:smile:.json"
    res = CliRunner().invoke(cli, ["capture", f"{factory}:make", str(out)])
    assert res.exit_code == 0, res.output
    assert out.exists()
    assert "\x1b" not in res.output and "\U0001f604" not in res.output
    assert "g\\x1b[31m:smile:.json" in res.output


def test_cli_capture_then_plan_then_fidelity(tmp_path):
    factory = tmp_path / "model.py"
    factory.write_text(FACTORY)
    out = tmp_path / "g.json"
    runner = CliRunner()
    res = runner.invoke(cli, ["capture", f"{factory}:make", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["format"] == "remat-graph" and doc["meta"]["torch"]["factory"] == f"{factory}:make"
    plan_file = tmp_path / "plan.json"
    res = runner.invoke(cli, ["plan", str(out), "-s", "dtr", "-b", "0.8x", "-o", str(plan_file)])
    assert res.exit_code == 0, res.output
    assert json.loads(plan_file.read_text())["provenance"]["factory"] == f"{factory}:make"
    # the README's flow: the plan file applied from Python to the same factory's model
    from remat_cli.torch.fidelity import load_factory

    model, inputs, loss_fn = load_factory(f"{factory}:make")
    reference = _grads(eager_step(model, loss_fn), model, inputs)
    step = apply(model, str(plan_file), inputs, loss_fn)
    assert _equal(_grads(step, model, inputs), reference) and step.fallbacks == 0
    res = runner.invoke(cli, ["fidelity", f"{factory}:make", "-b", "0.8x", "-s", "chain-dp", "--runs", "1", "--format", "json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    rows = {r["strategy"]: r for r in report["plans"]}
    assert {"store-all", "eager", "chain-dp", "chain-dp+sac"} <= set(rows)
    for name in ("store-all", "chain-dp"):
        r = rows[name]
        for key in (
            "budget_bytes",
            "predicted_peak_bytes",
            "measured_peak_bytes",
            "predicted_overhead",
            "measured_flops_overhead",
            "predicted_seconds",
            "measured_seconds",
            "fallbacks",
            "grads_match",
        ):
            assert key in r
        assert r["grads_match"] is True and r["fallbacks"] == 0
        assert abs(r["measured_peak_bytes"] / r["predicted_peak_bytes"] - 1) <= 0.05
        assert r["measured_flops_overhead"] == pytest.approx(r["predicted_overhead"], abs=1e-9)
    assert rows["chain-dp+sac"]["grads_match"] is True
    # the table, piped: the same plans, one row each (it once failed on a missing import)
    res = runner.invoke(cli, ["fidelity", f"{factory}:make", "-b", "0.8x", "-s", "chain-dp", "--runs", "1", "--no-sac"])
    assert res.exit_code == 0, res.output
    assert "chain-dp" in res.output and "store-all" in res.output and "Traceback" not in res.output
    assert " exec " in res.output  # the executor's own overhead has a column


def test_cli_bad_factory_is_one_line(tmp_path):
    factory = tmp_path / "model.py"
    factory.write_text(FACTORY)
    runner = CliRunner()
    for spec, message in (
        (f"{factory}:broken", "must return (model, inputs)"),
        (f"{factory}:missing", "has no function 'missing'"),
        (f"{tmp_path}/nope.py:make", "no such file"),
        ("model.py", "expected FILE.py:FACTORY"),
    ):
        res = runner.invoke(cli, ["capture", spec, str(tmp_path / "o.json")])
        assert res.exit_code == 2, res.output
        assert message in res.output and "Traceback" not in res.output


def test_without_torch_commands_say_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    res = CliRunner().invoke(cli, ["capture", "x.py:make", str(tmp_path / "o.json")])
    assert res.exit_code == 2
    assert "pip install 'remat-cli[torch]'" in res.output and len(res.output.strip().splitlines()) == 1
