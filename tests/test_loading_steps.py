"""Loading is explicit steps: read_file says what the file holds (graph, facts, warnings),
build_graph makes the graph to schedule; Graph.meta holds plain data only."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from _onnx_models import init, mlp_model, model, save, tensor

from remat_cli.costmodel import roofline_seconds
from remat_cli.loaders import LoadOptions, build_graph, load_graph, other_variant, read_file
from remat_cli.simulate import require_valid
from remat_cli.strategies.store_all import store_all_schedule

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_graphs"


def _plain(value: object) -> bool:
    """JSON text round-trips it: no objects, closures or arrays hide in it."""
    return json.loads(json.dumps(value, allow_nan=False)) == value


def test_load_options_carry_no_callables():
    for f in fields(LoadOptions):
        assert not callable(getattr(LoadOptions(), f.name)), f.name
    assert "extra" not in {f.name for f in fields(LoadOptions)}


@settings(max_examples=12, deadline=None)
@given(
    training=st.sampled_from([None, False]),
    precision=st.sampled_from(["fp32", "bf16", "amp"]),
    attention=st.sampled_from(["fused", "unfused"]),
    world=st.sampled_from([1, 4]),
    convention=st.sampled_from([None, "checkmate"]),
)
def test_meta_is_plain_data_for_every_graph_option(training, precision, attention, world, convention):
    options = LoadOptions(
        dims=(("batch", 2), ("sequence", 16)),
        training=training,
        precision=precision,
        attention=attention,
        world_size=world,
        shard="optimizer" if world > 1 else "none",
        convention=convention,
    )
    loaded = read_file(SAMPLES / "gpt2.onnx", options)
    assert _plain(loaded.graph.meta)
    built = build_graph(loaded, options)
    assert _plain(built.graph.meta), [k for k, v in built.graph.meta.items() if not _plain(v)]
    assert built.graph.is_training == (training is None)
    assert (built.facts is None) == built.graph.is_training
    label, other = other_variant(loaded, options)
    assert _plain(other.meta) and other.is_training != built.graph.is_training
    assert label == ("inference" if built.graph.is_training else "training")
    for g in (built.graph, other):
        assert require_valid(g, store_all_schedule(g)[0]).peak_bytes >= g.lb


def test_read_file_returns_the_forward_graph_and_its_facts():
    options = LoadOptions(dims=(("batch", 2),))
    loaded = read_file(SAMPLES / "resnet18.onnx", options)
    fwd, facts = loaded.graph, loaded.facts
    assert loaded.format == "onnx" and not fwd.is_training and facts is not None
    assert len(facts.slots) == len(facts.dtypes) == len(facts.float_bytes) == len(facts.shapes) == fwd.n
    # the graph's seconds are the one roofline formula over the facts
    assert np.array_equal(fwd.seconds, roofline_seconds(facts.flops, facts.nbytes, facts.peak, facts.bandwidth))
    # reading twice gives the same graph; building does not change what was read
    again = build_graph(loaded, options)
    assert again.graph.is_training and loaded.graph is fwd
    assert build_graph(loaded, options).graph.cost.tolist() == again.graph.cost.tolist()
    assert load_graph(SAMPLES / "resnet18.onnx", options).mem.tolist() == again.graph.mem.tolist()


def test_json_graphs_have_no_facts_and_no_other_variant():
    for name, kind in (
        ("unet_train.json", "remat-json"),
        ("diamond_dag.nodelink.json", "node-link"),
        ("random_dag.twremat.txt", "twremat"),
    ):
        loaded = read_file(SAMPLES / name)
        assert loaded.format == kind and loaded.facts is None and loaded.warnings == ()
        assert other_variant(loaded) is None
        assert build_graph(loaded).graph is loaded.graph or build_graph(loaded).graph.n == loaded.graph.n


def _unknown_op_model():
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"], name="mm"),
        helper.make_node("Frob", ["a"], ["b"], name="f1", domain="acme"),
        helper.make_node("Relu", ["b"], ["out"], name="relu"),
    ]
    m = model(nodes, [tensor("x", [2, 4])], [tensor("out", [2, 4])], [init("W", (4, 4))], value_info=[tensor("b", [2, 4])])
    m.opset_import.append(helper.make_opsetid("acme", 1))
    return m


def test_warnings_are_returned_in_order_and_passed_to_the_callback(tmp_path):
    path = save(_unknown_op_model(), tmp_path)
    seen: list[str] = []
    loaded = read_file(path, LoadOptions(), warn=seen.append)
    assert len(loaded.warnings) == 1 and "without a cost model" in loaded.warnings[0]
    built = build_graph(loaded, LoadOptions(), warn=seen.append)
    # reading warned about the cost; building the training graph about the autograd table
    assert built.warnings[0] == loaded.warnings[0] and "autograd table" in built.warnings[1]
    assert list(built.warnings) == seen
    # without a callback nothing is lost: the messages are in the result
    assert build_graph(read_file(path), LoadOptions()).warnings == built.warnings


def test_the_inference_pair_comes_from_explicit_steps(tmp_path):
    path = save(mlp_model(), tmp_path)
    options = LoadOptions(dims=(("batch", 4),), training=False)
    loaded = read_file(path, options)
    inference = build_graph(loaded, options).graph
    label, training = other_variant(loaded, options)
    assert label == "training" and training.is_training and not inference.is_training
    assert training.mem.tolist() == load_graph(path, LoadOptions(dims=(("batch", 4),))).mem.tolist()


@pytest.mark.parametrize("name", ["gpt2.onnx"])
def test_attention_facts_are_plain_data_in_meta(name):
    g = load_graph(SAMPLES / name, LoadOptions(dims=(("batch", 1), ("sequence", 8))))
    facts = g.meta["attention"]
    assert facts["mode"] == "fused" and facts["blocks"] == 12 and _plain(facts)


def test_batch_workers_pass_loader_warnings_to_the_task_callback(tmp_path):
    from remat_cli.batch import make_tasks, plan_file
    from remat_cli.budget import parse_budget

    path = save(_unknown_op_model(), tmp_path)
    seen: list[str] = []
    quiet = make_tasks([str(path)], strategies=["store-all"], budgets=[parse_budget("1x")], load=LoadOptions())
    (task,) = make_tasks([str(path)], strategies=["store-all"], budgets=[parse_budget("1x")], load=LoadOptions(), warn=seen.append)
    assert task.keys == quiet[0].keys  # callbacks are not options: the resume key ignores them
    result = plan_file(task)
    assert [r.status for r in result.rows] == ["ok"]
    assert any("without a cost model" in w for w in seen) and any("autograd table" in w for w in seen)
