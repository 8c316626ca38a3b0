"""``Graph.meta["info"]`` holds typed facts as plain JSON data (``units.to_data``), never
display text: sizes, counts and FLOPs stay numbers until ``units.say`` renders them for
``remat info``. Graph files an older remat wrote (plain strings there) still render."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_cli.cli import cli
from remat_cli.loaders import LoadOptions, build_graph, other_variant, read_file
from remat_cli.loaders.remat_json import dumps
from remat_cli.report.tables import summary_to_json
from remat_cli.summary import summarize
from remat_cli.units import FACT_KINDS, Fact, Phrase, from_data, say, to_data

SAMPLES = Path(__file__).resolve().parent.parent / "sample_graphs"

#: A number already turned into words: a size ('44.6 MiB', '1,204,224 B'), a thousands
#: separator, FLOPs, a rate or a percentage. Only the renderer writes these.
FORMATTED = re.compile(r"\d+(\.\d+)? ?(B|KiB|MiB|GiB|TiB|PiB|[kMGTPE]?FLOP|TFLOP/s|GB/s)\b|\d,\d{3}|[+-]?\d+(\.\d+)?%")


def _text_in(value: Any) -> list[str]:
    """Every string inside a JSON value (keys of facts included, templates too)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_text_in(k), *_text_in(v))]
    if isinstance(value, list):
        return [s for v in value for s in _text_in(v)]
    return []


def _formatted(info: dict[str, Any]) -> dict[str, list[str]]:
    return {k: found for k, v in info.items() if (found := [s for s in _text_in(v) if FORMATTED.search(s)])}


ONNX_OPTIONS = {
    "training": {},
    "inference amp": {"training": False, "precision": "amp"},
    "bf16 sharded": {"precision": "bf16", "world_size": 4, "shard": "parameters"},
    "checkmate adam": {"convention": "checkmate", "optimizer": "adam"},
    "unfused, views kept, flops": {"attention": "unfused", "keep_views": True, "cost": "flops"},
}
DIMS = {"gpt2": (("batch", 2), ("sequence", 16)), "bert": (("batch", 2), ("sequence", 16))}


#: every option set on the small samples; two on the larger ones (loading them takes longer)
CASES = [
    (sample, how)
    for sample in ("resnet18", "gpt2", "unet", "mobilenet_v2", "bert", "vit_b16")
    for how in ONNX_OPTIONS
    if sample in ("resnet18", "gpt2", "unet") or how in ("training", "bf16 sharded")
]


@pytest.mark.parametrize(("sample", "how"), CASES)
def test_onnx_meta_info_holds_facts_not_display_text(sample: str, how: str) -> None:
    options = LoadOptions(dims=DIMS.get(sample, (("batch", 2),)), **ONNX_OPTIONS[how])
    loaded = read_file(SAMPLES / f"{sample}.onnx", options)
    graph = build_graph(loaded, options).graph
    _, other = other_variant(loaded, options)
    for g in (loaded.graph, graph, other):
        info = g.meta["info"]
        assert json.loads(json.dumps(info, allow_nan=False)) == info
        assert not _formatted(info), _formatted(info)
        assert all(isinstance(say(from_data(v)), str) for v in info.values())


def test_profile_and_json_graph_meta_info_holds_facts(tmp_path: Path) -> None:
    profile = tmp_path / "p.csv"
    profile.write_text("Conv,0.0001\nRelu,0.00001\n")
    options = LoadOptions(dims=(("batch", 2),), profile=str(profile), world_size=2, shard="optimizer")
    graph = build_graph(read_file(SAMPLES / "resnet18.onnx", options), options).graph
    assert "measured costs" in graph.meta["info"] and not _formatted(graph.meta["info"])
    for name in ("unet_train.json", "training_chain_32.json", "diamond_dag.nodelink.json"):
        options = LoadOptions(training=True)
        graph = build_graph(read_file(SAMPLES / name, options), options).graph
        assert not _formatted(graph.meta.get("info", {})), name


def _extra(graph_file: Path, *args: str) -> dict[str, Any]:
    out = CliRunner().invoke(cli, ["info", str(graph_file), "--no-decompose", "--format", "json", *args])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)["extra"]


def test_info_lines_read_as_before() -> None:
    """The rendered lines are today's words (pinned from the text the loaders wrote before)."""
    options = LoadOptions(dims=(("batch", 2),), world_size=4, shard="optimizer", optimizer="adam")
    loaded = read_file(SAMPLES / "resnet18.onnx", options)
    extra = summary_to_json(summarize(build_graph(loaded, options).graph, companion=other_variant(loaded, options)))["extra"]
    assert extra["parameters"] == "11,689,512 (44.6 MiB)"
    assert extra["device"] == "a100: 19.5 TFLOP/s fp32, 312 TFLOP/s fp16, 2039 GB/s"
    assert extra["forward FLOPs"] == "7.31 GFLOP"
    assert extra["step FLOPs"] == "21.9 GFLOP (forward, loss, backward)"
    assert extra["ONNX ops"] == "69 (Conv 20, BatchNormalization 20, Relu 17, Add 8, MaxPool 1, GlobalAveragePool 1, Flatten 1, Gemm 1)"
    assert extra["training graph"] == "autograd convention: 68 backward nodes, 20 statistics nodes, optimizer adam"
    assert extra["sharding"].startswith("ZeRO stage 1 over 4 devices; fixed memory per device ")
    assert extra["fixed memory parts"].startswith("inputs 1,204,224 B, parameters 46,758,048 B, constants and buffers 38,400 B")
    assert re.fullmatch(r"\S+ \S+ \(lower bound \S+ \S+, fixed \S+ \S+\)", extra["store-all peak (inference)"])
    fp32 = build_graph(read_file(SAMPLES / "resnet18.onnx", LoadOptions(dims=(("batch", 2),))), LoadOptions()).graph
    parts = say(from_data(fp32.meta["info"]["fixed memory parts"]))
    assert parts == "inputs 1.15 MiB, parameters 44.6 MiB, constants and buffers 37.5 KiB, gradients 44.6 MiB, optimizer state (sgd) 0 B"


def test_a_graph_file_with_old_display_strings_renders_the_same(tmp_path: Path) -> None:
    """remat JSON written by an older convert holds the lines as plain strings; it must read
    exactly as the facts a new convert writes."""
    options = LoadOptions(dims=(("batch", 2),), precision="amp")
    graph = build_graph(read_file(SAMPLES / "resnet18.onnx", options), options).graph
    new = tmp_path / "new.json"
    new.write_text(dumps(graph))
    doc = json.loads(new.read_text())
    assert isinstance(doc["meta"]["info"]["parameters"], dict)  # a fact, not text
    doc["meta"]["info"] = {k: say(from_data(v)) for k, v in doc["meta"]["info"].items()}
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    assert _extra(old) == _extra(new)
    assert _extra(old, "--training") == _extra(new, "--training")
    table = CliRunner().invoke(cli, ["info", str(old), "--no-decompose"])
    assert table.exit_code == 0 and "11,689,512 (44.6 MiB)" in table.output


def test_malformed_facts_in_a_graph_file_read_as_given(tmp_path: Path) -> None:
    """A file may hold anything in meta.info: what is not a well-formed fact is shown as it is."""
    odd = {
        "attribute": {"phrase": "{0.__class__}", "args": [1]},
        "named": {"phrase": "{x}", "args": [1]},
        "spec": {"phrase": "{:>9}", "args": [1]},
        "too few": {"phrase": "{} {}", "args": [1]},
        "unbalanced": {"phrase": "{", "args": []},
        "args not a list": {"phrase": "{}", "args": "a"},
        "not a number": {"value": "12", "kind": "bytes"},
        "a bool": {"value": True, "kind": "count"},
        "unknown kind": {"value": 1, "kind": "parsecs"},
        "nested list": [1, {"value": 1, "kind": "bytes"}],
    }
    doc = {"format": "remat-graph", "version": 1, "name": "g", "meta": {"info": {**odd, "fine": {"value": 2048, "kind": "bytes"}}}}
    doc["nodes"] = [{"id": "a", "mem": 4}, {"id": "b", "mem": 4, "inputs": ["a"]}]
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    extra = _extra(path)
    assert {k: extra[k] for k in odd} == odd and extra["fine"] == "2.00 KiB"
    table = CliRunner().invoke(cli, ["info", str(path), "--no-decompose"])
    assert table.exit_code == 0 and "2.00 KiB" in table.output


_text = st.text(st.characters(blacklist_characters="{}", blacklist_categories=("Cs",)), max_size=6)
_facts = st.builds(
    Fact,
    st.one_of(st.integers(-(2**53), 2**53), st.floats(allow_nan=False, allow_infinity=False, width=32)),
    st.sampled_from(FACT_KINDS),
)


def _phrases(args: st.SearchStrategy[Any]) -> st.SearchStrategy[Phrase]:
    return st.lists(st.tuples(_text, args), max_size=4).flatmap(
        lambda parts: st.just(Phrase("".join(t + "{}" for t, _ in parts), tuple(a for _, a in parts)))
    )


_values = st.recursive(st.one_of(_facts, _text, st.integers(0, 10**6)), _phrases, max_leaves=8)


@settings(max_examples=60, deadline=None)
@given(value=_values)
def test_facts_survive_json_and_render_the_same(value: Any) -> None:
    data = json.loads(json.dumps(to_data(value), allow_nan=False))
    back = from_data(data)
    assert back == value
    assert say(back) == say(value)


_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["phrase", "args", "value", "kind", "x"]), inner, max_size=3),
        st.fixed_dictionaries({"phrase": st.text(max_size=8), "args": st.lists(inner, max_size=3)}),
        st.fixed_dictionaries({"value": inner, "kind": st.sampled_from([*FACT_KINDS, "x"])}),
    ),
    max_leaves=10,
)


@settings(max_examples=80, deadline=None)
@given(value=_json)
def test_any_json_in_meta_info_renders_without_error(value: Any) -> None:
    said = say(from_data(value))
    assert isinstance(said, str) or said == value


def test_progress_labels_are_names_or_phrases_rendered_by_the_caller() -> None:
    """The core hands progress a name or a Phrase (sizes as facts); the CLI renders it."""
    from remat_cli import generators
    from remat_cli.planner import make_plan, store_all_peak
    from remat_cli.strategies import get_strategy
    from remat_cli.sweep import sweep
    from remat_cli.training import checkmate_training_graph

    g = checkmate_training_graph(generators.chain(9, mem=[k * 1000 for k in range(1, 10)]))
    labels: list[Any] = []
    sweep(g, [get_strategy("store-all"), get_strategy("chen-greedy")], points=3, progress=lambda d, n, label: labels.append(label))
    make_plan(g, "auto", int(0.7 * store_all_peak(g)), {"progress": lambda d, n, label: labels.append(label)})
    assert any(isinstance(x, Phrase) for x in labels)
    for label in labels:
        assert isinstance(label, (str, Phrase)) and not (isinstance(label, str) and FORMATTED.search(label)), label
    said = [say(x) for x in labels]
    assert any(re.fullmatch(r"chen-greedy @ \d+(\.\d+)? (B|KiB)", s) for s in said), said
    assert "chen-greedy: smallest budget" in said and "auto: treewidth" in said
    assert any(s.startswith("treewidth: ") for s in said)
