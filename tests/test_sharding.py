"""--world-size/--shard: fixed memory per device as ZeRO stages 1-3 divide it."""

from __future__ import annotations

from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_cli.cli import cli
from remat_cli.sharding import shard_fixed_memory
from remat_cli.simulate import require_valid
from remat_cli.strategies.store_all import store_all_schedule

from _onnx_models import load, save
from test_precision import linear_stack


def _peak(graph) -> int:
    schedule, _ = store_all_schedule(graph)
    return int(require_valid(graph, schedule).peak_bytes)


@settings(max_examples=8, deadline=None)
@given(
    layers=st.integers(1, 4),
    width=st.sampled_from([4, 8, 12]),
    world=st.sampled_from([2, 3, 8]),
    optimizer=st.sampled_from(["sgd", "momentum", "adam"]),
    precision=st.sampled_from(["fp32", "bf16", "amp"]),
)
def test_zero3_divides_parameters_gradients_and_optimizer_up_to_the_gathered_layer(
    tmp_path_factory, layers, width, world, optimizer, precision
):
    path = save(linear_stack(layers, width), tmp_path_factory.mktemp("s"))
    kw = dict(dims={"batch": 2}, optimizer=optimizer, precision=precision)
    one = load(path, **kw)
    many = load(path, world_size=world, shard="parameters", **kw)
    params = one.meta["parameter_bytes"]
    copies = {"sgd": 0, "momentum": 1, "adam": 2}[optimizer]
    amp_copies = one.meta["fixed_parts"].get("half weight copies (amp)", 0)
    sharded = params * (2 + copies) + amp_copies  # parameters, gradients, optimizer state (+ amp copies)
    rest = one.fixed_mem - sharded  # inputs, constants: not sharded
    layer = width * width * (2 if precision == "bf16" else 4)  # the largest op's parameters
    ceil = lambda x: -(-x // world)  # noqa: E731
    expect = rest + ceil(params) + ceil(params) + copies * ceil(params) + ceil(amp_copies) + 2 * layer
    assert many.fixed_mem == expect
    # everything but the gathered layer is divided by the world size (up to rounding up)
    assert many.fixed_mem - 2 * layer - rest <= -(-sharded // world) + 4
    # the activations are the same per device: the store-all peak moves by the fixed memory only
    assert _peak(one) - one.fixed_mem == _peak(many) - many.fixed_mem
    assert many.lb - many.fixed_mem == one.lb - one.fixed_mem
    assert many.meta["sharding"]["stage"] == 3


def test_stages_divide_what_the_zero_paper_says():
    parts = {"inputs": 100, "parameters": 800, "gradients": 800, "optimizer state (adam)": 1600}
    s0 = shard_fixed_memory(parts, 8, "none", 80)
    s1 = shard_fixed_memory(parts, 8, "optimizer", 80)
    s2 = shard_fixed_memory(parts, 8, "gradients", 80)
    s3 = shard_fixed_memory(parts, 8, "parameters", 80)
    assert s0.total == 3300
    assert s1.total == 100 + 800 + 800 + 200
    assert s2.total == 100 + 800 + 100 + 200 + 80  # + one op's full gradient before reduce-scatter
    assert s3.total == 100 + 100 + 100 + 200 + 80 + 80  # + that op's gathered parameters
    assert shard_fixed_memory(parts, 1, "parameters", 80).total == 3300  # one device: nothing to divide


def test_sharding_cli_and_bad_input(tmp_path):
    path = save(linear_stack(2, 8), tmp_path)
    r = CliRunner().invoke(cli, ["info", str(path), "--dim", "batch=2", "--world-size", "8", "--shard", "parameters"])
    assert r.exit_code == 0, r.output
    assert "ZeRO stage 3 over 8 devices" in r.output
    r = CliRunner().invoke(cli, ["info", "sample_graphs/training_chain_32.json", "--world-size", "8", "--shard", "optimizer"])
    assert r.exit_code == 2 and "parameter sizes" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(cli, ["info", str(path), "--world-size", "0"])
    assert r.exit_code == 2


def test_remat_toml_sets_precision_and_sharding(tmp_path):
    from remat_cli import check as check_mod
    from remat_cli import config as config_mod

    save(linear_stack(2, 8), tmp_path)
    (tmp_path / "remat.toml").write_text(
        'budget = "1GiB"\nprecision = "bf16"\nworld_size = 8\nshard = "parameters"\n[[models]]\npath = "m.onnx"\ndims = { batch = 2 }\n'
    )
    conf = config_mod.load_config(tmp_path / "remat.toml")
    (spec,) = check_mod.specs_from_entries(conf.models, default_strategy="store-all")
    assert (spec.load.precision, spec.load.world_size, spec.load.shard) == ("bf16", 8, "parameters")
    sharded = load(tmp_path / "m.onnx", dims={"batch": 2}, precision="bf16", world_size=8, shard="parameters")
    from remat_cli.loaders import load_graph

    assert load_graph(spec.path, spec.load).fixed_mem == sharded.fixed_mem
