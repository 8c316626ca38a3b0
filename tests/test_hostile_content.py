"""Hostile content (issue 11): what a file says must be checked, not trusted.

Each test is built from a minimal reproducer of one class of defect found by fuzzing:
lying plan files, sizes that wrap int64, non-finite numbers, round trips that do not
read back, markup and newlines in names, wrong JSON types, non-ASCII digits, deep
nesting, and content sniffing. Bad input must end in one clear line and exit 2; a false
claim in a plan file in one line and exit 1; never a traceback or a numpy warning.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_cli.cli import cli
from remat_cli.errors import InputError, NoPlanError
from remat_cli.graph import MAX_COST, MAX_TOTAL_BYTES, MAX_VALUE_BYTES, Graph, NodeSpec
from remat_cli.loaders import load_graph, remat_json, twremat
from remat_cli.plandoc import read_plan
from remat_cli.planner import make_plan
from remat_cli.simulate import simulate
from remat_cli.training import build_training_graph

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

SAMPLES = Path(__file__).resolve().parent.parent / "sample_graphs"
CHAIN = SAMPLES / "training_chain_32.json"


def run(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def one_line(result, code: int) -> str:
    """The run ended with ``code`` and printed exactly one non-empty line, no traceback."""
    assert result.exit_code == code, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    return lines[0]


def graph_doc(nodes: list[dict], **extra) -> dict:
    return {"format": "remat-graph", "version": 1, "name": "g", "nodes": nodes, **extra}


def write_json(tmp_path: Path, doc, name: str = "g.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


def chain_doc(ids=("a", "b", "c"), mem=100, op="Op") -> dict:
    nodes = []
    for k, x in enumerate(ids):
        nodes.append({"id": x, "op": op, "inputs": [ids[k - 1]] if k else [], "mem": mem, "cost": 1})
    return graph_doc(nodes)


# ------------------------------------------------------------------ validate checks claims
@pytest.fixture()
def honest_plan(tmp_path):
    """A chain-dp plan of the sample training chain under 0.6x, written by `remat plan`."""
    out = tmp_path / "plan.json"
    res = run("plan", CHAIN, "-s", "chain-dp", "-b", "0.6x", "-o", out, "--format", "json")
    assert res.exit_code == 0, res.output
    return out, json.loads(out.read_text())


def test_validate_checks_and_names_the_claims_of_an_honest_plan(honest_plan):
    path, _doc = honest_plan
    res = run("validate", CHAIN, path, "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["claims_hold"] is True
    for claim in ("budget_bytes", "budget_ratio", "graph.nodes", "metrics.peak_bytes", "metrics.cost", "metrics.overhead"):
        assert claim in doc["claims_checked"]
    assert {"strategy", "info", "store_all_peak_bytes", "metrics.solve_seconds"} <= set(doc["claims_ignored"])
    table = run("validate", CHAIN, path)
    assert table.exit_code == 0 and "claims checked" in table.output and "not checked" in table.output


def test_validate_refuses_a_plan_whose_stated_budget_is_below_its_peak(honest_plan, tmp_path):
    path, doc = honest_plan
    doc["budget_bytes"] = 1
    doc["budget_ratio"] = 1 / doc["store_all_peak_bytes"]
    path.write_text(json.dumps(doc))
    line = one_line(run("validate", CHAIN, path), 1)
    assert "budget_bytes 1" in line and str(doc["metrics"]["peak_bytes"]) in line


@pytest.mark.parametrize(
    "field, value",
    [
        ("peak_bytes", 1),
        ("fixed_bytes", 5),
        ("lower_bound_bytes", 7),
        ("recomputations", 0),
        ("steps", 3),
        ("cost", 1.0),
        ("base_cost", 2.5),
        ("overhead", 0.0),
        ("valid", False),
    ],
)
def test_validate_refuses_metrics_that_disagree_with_the_replay(honest_plan, field, value):
    path, doc = honest_plan
    assert doc["metrics"][field] != value  # the lie is a lie
    doc["metrics"][field] = value
    path.write_text(json.dumps(doc))
    line = one_line(run("validate", CHAIN, path), 1)
    assert f"metrics.{field}" in line


def test_validate_refuses_a_wrong_node_count_and_ratio(honest_plan):
    path, doc = honest_plan
    lie = dict(doc, graph=dict(doc["graph"], nodes=doc["graph"]["nodes"] + 1))
    path.write_text(json.dumps(lie))
    assert "graph.nodes" in one_line(run("validate", CHAIN, path), 1)
    lie = dict(doc, budget_ratio=0.01)
    path.write_text(json.dumps(lie))
    assert "budget_ratio" in one_line(run("validate", CHAIN, path), 1)


@pytest.mark.parametrize(
    "change",
    [
        {"graph": "g"},
        {"graph": {"sha256": 12}},
        {"budget_bytes": "12"},
        {"budget_bytes": -5},
        {"budget_bytes": 10**400},
        {"metrics": [1, 2]},
        {"metrics": {"peak_bytes": "big"}},
        {"metrics": {"cost": True}},
        {"metrics": {"cost": 10**400}},
        {"version": True},
        {"schedule": [["compute", ["a"]]]},
        {"schedule": [[["compute"], "a"]]},
        {"schedule": [["compute", {"id": "a"}]]},
        {"schedule": "compute a"},
    ],
    ids=str,
)
def test_plan_json_of_the_wrong_types_is_one_line_and_exit_2(honest_plan, change):
    path, doc = honest_plan
    doc.update(change)
    path.write_text(json.dumps(doc))
    one_line(run("validate", CHAIN, path), 2)


@pytest.mark.parametrize(
    "text", ['{"format": "remat-plan", "version": 1, "schedule": [], "budget_bytes": NaN}', "[" * 100_000 + "]" * 100_000]
)
def test_plan_json_that_is_not_strict_or_too_deep_is_refused(tmp_path, text):
    path = tmp_path / "p.json"
    path.write_text(text if text.startswith("{") else '{"x": ' + text + "}")
    one_line(run("validate", CHAIN, path), 2)


# ------------------------------------------------------------------ sizes and costs
@pytest.mark.parametrize(
    "node, words",
    [
        ({"mem": 2**63}, "2**53"),
        ({"mem": 2**53 + 1}, "2**53"),
        ({"mem": -1}, "negative"),
        ({"mem": 10**400}, "2**53"),
        ({"workspace": 2**70}, "2**53"),
        ({"cost": 10**400}, "limit"),
        ({"cost": -1}, "negative"),
        ({"seconds": 1e300}, "limit"),
    ],
    ids=str,
)
def test_sizes_and_costs_that_cannot_be_real_are_refused_naming_the_node(tmp_path, node, words):
    doc = chain_doc()
    doc["nodes"][1].update(node)
    line = one_line(run("info", write_json(tmp_path, doc), "--no-decompose"), 2)
    assert "'b'" in line and words in line


@pytest.mark.parametrize("text", ['"cost": 1e400', '"cost": NaN', '"mem": Infinity', '"cost": -Infinity'])
def test_non_finite_numbers_are_refused_on_load(tmp_path, text):
    doc = json.dumps(chain_doc()).replace('"cost": 1', text, 1)
    assert text in doc
    one_line(run("info", write_json(tmp_path, doc), "--no-decompose"), 2)


def test_total_size_beyond_int64_exactness_is_refused(tmp_path):
    ids = [f"n{k}" for k in range(600)]
    doc = graph_doc([{"id": x, "inputs": [], "mem": MAX_VALUE_BYTES} for x in ids])  # 600 * 2**53 > 2**62
    line = one_line(run("info", write_json(tmp_path, doc), "--no-decompose"), 2)
    assert "2**62" in line


_NEAR = st.one_of(st.integers(0, 2**20), st.integers(2**52, 2**53 + 8), st.integers(2**61, 2**63 + 8))


@settings(max_examples=60)
@given(sizes=st.lists(_NEAR, min_size=1, max_size=6), fixed=_NEAR)
def test_lower_bound_is_exact_or_refused_for_sizes_near_the_limits(sizes, fixed):
    """A fan-in: every node feeds the last one; LB = fixed + Σ sizes + the last, with no
    wrap; a graph with a size above 2**53 or a total above 2**62 is refused instead (fixed
    memory, a sum of parameters and state, may pass 2**53 as long as the total does not)."""
    nodes = [NodeSpec(id=f"v{k}", mem=m) for k, m in enumerate(sizes)]
    nodes.append(NodeSpec(id="sink", inputs=[f"v{k}" for k in range(len(sizes))], mem=sizes[0]))
    true_lb = fixed + sum(sizes) + sizes[0]
    if max(sizes) > MAX_VALUE_BYTES or true_lb > MAX_TOTAL_BYTES:
        with pytest.raises(InputError):
            Graph.from_nodes(nodes, fixed_mem=fixed)
        return
    g = Graph.from_nodes(nodes, fixed_mem=fixed)
    assert g.lb == true_lb
    plan = make_plan(g, "store-all", None)
    m = simulate(g, plan.schedule).metrics
    assert m is not None and m.peak_bytes == true_lb and m.lower_bound_bytes == true_lb


@settings(max_examples=40)
@given(
    fixed=st.one_of(st.integers(0, 2**20), st.integers(2**53 - 4, 2**53 + 2**40), st.integers(2**62 - 2**54, 2**62 + 8)),
    params=st.one_of(st.integers(0, 2**20), st.integers(2**53 - 4, 2**53)),
    fmt=st.sampled_from(["remat-json", "node-link"]),
)
def test_fixed_memory_the_graph_accepts_reads_back_from_what_convert_writes(tmp_path_factory, fixed, params, fmt):
    """Fixed memory is a sum (an ONNX model's parameters, their gradients and optimizer
    state: fuzzing found a 10.5 PiB one) that a graph from arrays accepts up to 2**62;
    `remat convert` wrote it and reading the file back refused it above 2**53. A file's
    fixed memory has the graph's own limit now: what is written reads back."""
    nodes = [NodeSpec(id="x", mem=3, cost=1.0), NodeSpec(id="y", inputs=["x"], mem=params, cost=1.0)]
    try:
        g = Graph.from_nodes(nodes, fixed_mem=fixed)
    except InputError as exc:
        assert fixed + 3 + params > MAX_TOTAL_BYTES and "2**62" in exc.message
        return
    assert g.fixed_mem == fixed
    path = tmp_path_factory.mktemp("conv") / "g.json"
    if fmt == "remat-json":
        path.write_text(remat_json.dumps(g))
    else:
        import networkx

        path.write_text(json.dumps(networkx.node_link_data(g.to_networkx(), edges="links")))
    from remat_cli.limits import Limits
    from remat_cli.loaders import LoadOptions

    back = load_graph(path, LoadOptions(limits=Limits(max_total_bytes=MAX_TOTAL_BYTES)))  # (--max-total-size)
    assert back.fixed_mem == fixed and back.lb == g.lb


def test_training_graph_sums_beyond_the_limit_are_refused_not_wrapped():
    """510 inputs of 2**53 B fit forward (< 2**62); the training graph's sums pass 2**63."""
    k = 510
    nodes = [NodeSpec(id=f"x{i}", mem=MAX_VALUE_BYTES, cost=1.0) for i in range(k)]
    nodes.append(NodeSpec(id="y", inputs=[f"x{i}" for i in range(k)], mem=1, cost=1.0))
    fwd = Graph.from_nodes(nodes)
    for convention in ("checkmate", "autograd"):
        with pytest.raises(InputError, match=r"2\*\*(53|62)"):
            build_training_graph(fwd, convention=convention)


def test_training_meta_parameter_bytes_must_be_a_size(tmp_path):
    doc = chain_doc()
    doc["meta"] = {"parameter_bytes": "lots"}
    line = one_line(run("info", write_json(tmp_path, doc), "--training", "--no-decompose"), 2)
    assert "parameter_bytes" in line


def test_seconds_near_the_limit_keep_every_json_number_finite(tmp_path):
    doc = chain_doc()
    for nd in doc["nodes"]:
        nd["seconds"] = MAX_COST
        nd["cost"] = MAX_COST
    path = write_json(tmp_path, doc)
    out = tmp_path / "p.json"
    res = run("plan", path, "-s", "store-all", "-o", out, "--format", "json")
    assert res.exit_code == 0, res.output
    for text in (res.stdout, out.read_text()):
        json.loads(text, parse_constant=lambda c: pytest.fail(f"non-finite {c} in JSON output"))


# ------------------------------------------------------------------ round trips
def test_negative_zero_cost_does_not_change_the_graph_hash(tmp_path):
    doc = chain_doc()
    doc["nodes"][0]["cost"] = 0
    plain = load_graph(write_json(tmp_path, doc, "a.json"))
    doc["nodes"][0]["cost"] = -0.0
    path = write_json(tmp_path, doc, "b.json")
    assert "-0.0" in path.read_text()
    signed = load_graph(path)
    assert signed.sha256 == plain.sha256
    out = tmp_path / "c.json"
    assert run("convert", path, out).exit_code == 0
    assert load_graph(out).sha256 == plain.sha256


_ODD = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8)


@settings(max_examples=30)
@given(
    ids=st.lists(_ODD, min_size=1, max_size=5, unique=True),
    costs=st.lists(st.sampled_from([0.0, -0.0, 1.5, 2.0, 1e-300, MAX_COST]), min_size=5, max_size=5),
)
def test_remat_json_round_trips_any_ids_exactly(tmp_path_factory, ids, costs):
    nodes = [NodeSpec(id=x, inputs=ids[:k][-2:], mem=k * 7, cost=costs[k], op=f"[bold]{x}") for k, x in enumerate(ids)]
    g = Graph.from_nodes(nodes, fixed_mem=3)
    path = tmp_path_factory.mktemp("rt") / "g.json"
    path.write_text(remat_json.dumps(g))
    back = load_graph(path)
    assert back.sha256 == g.sha256 and back.ids == g.ids and back.ops == g.ops
    assert back.cost.tolist() == g.cost.tolist()


def test_convert_to_twremat_reads_back_even_with_a_bad_stated_memlimit(tmp_path):
    doc = chain_doc()
    doc["meta"] = {"memlimit": -400}
    out = tmp_path / "g.txt"
    assert run("convert", write_json(tmp_path, doc), out).exit_code == 0
    assert "memlimit -" not in out.read_text()
    back = load_graph(out)
    g = load_graph(tmp_path / "g.json")
    assert back.mem.tolist() == g.mem.tolist() and back.cost.tolist() == g.cost.tolist()
    assert back.meta["memlimit"] >= 0


def test_plan_text_refuses_ids_it_cannot_write_and_json_keeps_them(tmp_path):
    path = write_json(tmp_path, chain_doc(ids=("a b", "c\td", "e")))
    line = one_line(run("plan", path, "-s", "store-all", "-o", tmp_path / "plan.txt"), 2)
    assert "plan.txt" in line and "'a b'" in line and "whitespace" in line
    out = tmp_path / "plan.json"
    assert run("plan", path, "-s", "store-all", "-o", out).exit_code == 0
    g = load_graph(path)
    schedule, _ = read_plan(out, g)
    assert simulate(g, schedule).valid
    assert run("validate", path, out).exit_code == 0


def test_plan_text_round_trips_plain_ids(tmp_path):
    path = write_json(tmp_path, chain_doc(ids=("a", "b²", "[c]")))
    out = tmp_path / "plan.txt"
    assert run("plan", path, "-s", "store-all", "-o", out).exit_code == 0
    g = load_graph(path)
    schedule, _ = read_plan(out, g)
    assert simulate(g, schedule).valid and schedule.named(g.ids)[0] == ["compute", "a"]


@pytest.mark.parametrize("digit", ["\u00b2", "\u0661", "\uff11", "\U0001d7cf"])
def test_plan_text_numbers_are_ascii_digits_only(tmp_path, digit):
    # fuzz: 'f \u00b2' passed str.isdigit, then int() raised "internal error: ValueError";
    # '\u0661' (Arabic one) would have been read by int() as node number 1
    path = write_json(tmp_path, chain_doc())
    plan = tmp_path / "plan.txt"
    plan.write_text(f"c 0\nc {digit}\n", encoding="utf-8")
    line = one_line(run("validate", path, plan), 2)
    assert "plan.txt:2" in line and "unknown node" in line
    plan.write_text("c 0\nc 1\nc 2\n")  # ASCII numbers still name nodes by position
    g = load_graph(path)
    schedule, _ = read_plan(plan, g)
    assert simulate(g, schedule).valid and schedule.named(g.ids)[1] == ["compute", "b"]


# ------------------------------------------------------------------ names: markup, newlines, bytes
@pytest.mark.parametrize("name", ["[/x]", "[bold red]loud", "a[/]b", "[link=http://x]y", ":smile:", "x:thumbs_up:y"])
def test_markup_in_names_is_printed_literally(tmp_path, name):
    doc = chain_doc(ids=("a", name, "c", "d", "e", "f", "g"), op=name)
    doc["name"] = name
    doc["cost_unit"] = name
    doc["meta"] = {"info": {name: name}}
    path = write_json(tmp_path, doc)
    for args in (("info", path, "--no-decompose"), ("plan", path, "--training", "-s", "chain-dp", "-b", "0.7x")):
        res = run(*args)
        assert res.exit_code == 0, res.output
        assert name in res.output
    assert "values recomputed most" in res.output


@pytest.mark.parametrize("name", ["a\x1b[31mred\x1b[0m", "b\rhidden", "bell\x07", "\u202eevil", "t\x1b]0;title\x07"])
@pytest.mark.parametrize("terminal", [False, True])
def test_control_characters_in_names_are_shown_escaped_in_reports(tmp_path, monkeypatch, name, terminal):
    """A name from a file that holds ESC, CR, BEL or a bidi override would colour, retitle
    or move the cursor of the user's terminal, or hide part of itself: reports print such
    characters written out (``\\x1b``), on a pipe and on a terminal, in tables, batch rows
    and check lines; the name never appears as it is."""
    if terminal:
        monkeypatch.setenv("FORCE_COLOR", "1")
        monkeypatch.setenv("COLUMNS", "200")
    shown = name.encode("unicode_escape").decode()  # (as Python writes it: \x1b, \r, \u202e)
    doc = chain_doc(ids=("a", name, "c", "d", "e", "f", "g"), op=name)
    doc["name"] = name
    outputs = []
    for args in (
        ("info", write_json(tmp_path, doc), "--no-decompose"),
        ("plan", write_json(tmp_path, doc), "--training", "-s", "chain-dp", "-b", "0.7x", "-v"),
    ):
        res = run(*args)
        assert res.exit_code == 0, res.output
        outputs.append(res.output)
    folder = tmp_path / "models"
    folder.mkdir()
    bad = write_json(folder, doc, name=f"m{name}.json")
    outputs.append(run("batch", folder, "-b", "0.01x").output)
    res = run("check", bad, "-b", "0.01x")
    assert res.exit_code == 1, res.output
    outputs.append(res.output)
    for out in outputs:
        assert name not in out and shown in out, out


@pytest.mark.parametrize("model", ["a[/]b.py:make", "[bold]m.py:make"])
def test_a_model_path_with_markup_does_not_crash_the_spinner(tmp_path, monkeypatch, model):
    """On a terminal `remat fit` and `capture` show a spinner naming the model; rich reads
    it as markup, and ``a[/]b.py`` crashed it (an internal error) before the file was read."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, ["fit", model, "--budget", "1MiB", "--dim", "batch=?"])
    assert res.exit_code == 2, res.output
    assert "internal error" not in res.output and "no such file" in res.output.splitlines()[-1]


@pytest.mark.parametrize("name", [":smile:", "x:thumbs_up:y", "[bold]b", "a\tb"])
def test_names_in_error_lines_are_printed_as_they_are(tmp_path, name):
    """rich read an emoji code in a node's or a file's name as an emoji (x:smile:y printed
    as x😄y); error lines are plain text, a tab escaped so that the line stays one."""
    shown = name.replace("\t", "\\t")
    doc = chain_doc(ids=("a", name, "c"))
    doc["nodes"][1]["mem"] = 10**6  # (the largest value, so the lower bound names it)
    line = one_line(run("plan", write_json(tmp_path, doc), "-b", "1"), 1)  # (no plan: exit 1)
    assert f"({shown})" in line or f"'{shown}'" in line, line
    bad = write_json(tmp_path, "{bad", name=f"{name}.json")
    line = one_line(run("info", bad), 2)
    assert line.startswith(f"remat: error: {tmp_path / shown}.json: ") and "not valid JSON" in line, line


def _bash_word(word: str) -> bytes:
    """What bash makes of ``word`` (one word of a command line), as bytes."""
    import subprocess

    return subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, check=True, timeout=60).stdout


@settings(max_examples=60, deadline=None)
@given(
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
        | st.sampled_from("\x1b\x07\r\t'\\\x85\u202e\udcff"),
        min_size=1,
        max_size=12,
    )
)
def test_shell_word_is_the_same_text_when_pasted_into_bash(text):
    """The command a message suggests names the same file when the user pastes it: the
    word bash reads back is the text's bytes (a byte that is not UTF-8 included; no name
    or argument holds NUL)."""
    from remat_cli.units import shell_word

    word = shell_word(text)
    assert word.isprintable()
    assert _bash_word(word) == os.fsencode(text)


def test_the_suggested_tradeoff_command_names_a_file_with_an_escape_in_its_name(tmp_path):
    doc = chain_doc()
    path = write_json(tmp_path, doc, name="g\x1b[31m'x.json")
    line = one_line(run("plan", path, "-b", "150"), 1)  # (no plan: exit 1)
    assert "\x1b" not in line
    word = line.split("compare strategies: remat tradeoff ", 1)[1]
    assert _bash_word(word) == os.fsencode(str(path))


def test_an_error_exit_imports_no_rich(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from remat_cli.cli import main\n"
        f"sys.argv = ['remat', 'plan', {str(CHAIN)!r}, '-b', '1']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    print('exit', exc.code, file=sys.stderr)\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = out.stderr.strip().splitlines()
    assert lines[0].startswith("remat: error: budget 1 B") and lines[1] == "exit 1", out.stderr
    assert not any(m == "rich" or m.startswith("rich.") for m in lines[-1].split())


def test_newlines_in_names_stay_on_one_line(tmp_path):
    doc = chain_doc(ids=("a\nremat: error: fake", "b", "c"))
    doc["nodes"][0]["inputs"] = ["c"]  # a cycle through the name with a newline
    line = one_line(run("info", write_json(tmp_path, doc)), 2)
    assert "cycle" in line and "\\n" in line


def test_onnx_names_with_newlines_in_errors_stay_on_one_line(tmp_path):
    from onnx import helper

    from tests._onnx_models import model, save, tensor

    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="first\nline"),
        helper.make_node("Relu", ["x"], ["y"], name="second\nline"),
    ]
    path = save(model(nodes, [tensor("x", [2])], [tensor("y", [2])]), tmp_path)
    line = one_line(run("info", path, "--no-decompose"), 2)
    assert "'first\\nline'" in line


def test_onnx_node_names_that_are_not_utf8_become_text(tmp_path):
    from onnx import helper

    from tests._onnx_models import model, tensor

    nodes = [helper.make_node("Relu", ["x"], ["y"], name="QQQQ"), helper.make_node("Relu", ["y"], ["z"], name="RR")]
    data = model(nodes, [tensor("x", [2, 3])], [tensor("z", [2, 3])]).SerializeToString()
    assert data.count(b"QQQQ") == 1
    path = tmp_path / "bad.onnx"
    path.write_bytes(data.replace(b"QQQQ", b"\xff\xfeQQ"))
    try:
        g = load_graph(path)
    except InputError:  # refusing it with one line is also acceptable
        one_line(run("info", path, "--no-decompose"), 2)
        return
    assert all(isinstance(x, str) for x in g.ids)
    assert any("\ufffd" in x for x in g.ids)
    out = tmp_path / "g.json"
    assert run("convert", path, out).exit_code == 0
    assert run("plan", path, "-s", "store-all", "-o", tmp_path / "p.json").exit_code == 0


@pytest.mark.parametrize("flaw", ["undefined input", "two producers", "own output"])
def test_onnx_structure_errors_name_non_utf8_nodes_as_text(tmp_path, flaw):
    """A structural error about a node whose name or op type, or a value whose name, is not
    valid UTF-8 is one clean line with U+FFFD (was a TypeError concatenating bytes and str)."""
    from onnx import helper

    from tests._onnx_models import model, tensor

    reads = {"undefined input": ["QQv"], "two producers": ["x"], "own output": ["QQy"]}[flaw]
    nodes = [helper.make_node("QQop", reads, ["QQy"])]  # nameless: the error names op and index
    if flaw == "two producers":
        nodes.append(helper.make_node("Relu", ["x"], ["QQy"], name="QQn"))
    data = model(nodes, [tensor("x", [2])], [tensor("QQy", [2])]).SerializeToString()
    path = tmp_path / "bad.onnx"
    path.write_bytes(data.replace(b"QQ", b"\xff\xfe"))
    line = one_line(run("info", path, "--no-decompose"), 2)
    assert "\ufffd" in line and "internal error" not in line


# ------------------------------------------------------------------ ONNX dims
def _relu_model(in_shape, init_shape=None):
    from onnx import helper

    from tests._onnx_models import init, model, tensor

    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    inits = []
    if init_shape is not None:
        nodes.append(helper.make_node("Add", ["y", "w"], ["z"], name="add"))
        t = init("w", [1])
        del t.dims[:]
        t.dims.extend(init_shape)
        inits.append(t)
    out = "z" if init_shape is not None else "y"
    return model(nodes, [tensor("x", in_shape)], [tensor(out, None)], initializers=inits)


@pytest.mark.parametrize(
    "in_shape, init_shape, words",
    [
        ([2, -3], None, "'x': dimension #1 is -3"),
        ([0, 4], None, "'x': dimension #0 is 0"),
        ([2, 3], [-4, 3], "'w': dimension #0 is -4"),
        ([2**40, 2**40], None, "2**53"),
    ],
)
def test_onnx_dims_that_cannot_be_real_are_refused(tmp_path, in_shape, init_shape, words):
    from tests._onnx_models import save

    path = save(_relu_model(in_shape, init_shape), tmp_path)
    line = one_line(run("info", path, "--no-decompose"), 2)
    assert words in line


def test_onnx_dim_flag_beyond_the_limit_is_refused(tmp_path):
    from tests._onnx_models import save

    path = save(_relu_model(["batch", 3]), tmp_path)
    one_line(run("info", path, "--dim", f"batch={2**63}", "--no-decompose"), 2)


# ------------------------------------------------------------------ twremat grammar
@pytest.mark.parametrize(
    "text",
    [
        "p remat2\nnode 1 cpu ² mem 4\n",
        "p remat2\nnode 1 cpu 1 mem ²\n",
        "p remat2\nmemlimit ²\nnode 1 cpu 1 mem 4\n",
        "p remat2\nnode 1 cpu 1 mem 1_000\n",
        "p remat2\nnode 1 cpu 1 mem -400\n",
        "p remat2\nnode 1 cpu 1 mem ٣\n",
        "p remat2\nnode 1 cpu 1 mem " + "9" * 5000 + "\n",
    ],
)
def test_twremat_numbers_are_ascii_digits_only(tmp_path, text):
    path = tmp_path / "g.txt"
    path.write_text(text)
    one_line(run("info", path, "--no-decompose"), 2)


def test_twremat_splits_lines_and_fields_as_written(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("p remat2\nnode a\x1cb cpu 1 mem 4\nnode c deps a\x1cb cpu 2.5 mem 3 target\n")
    g = load_graph(path)
    assert g.ids == ("a\x1cb", "c") and g.cost.tolist() == [1.0, 2.5]


# ------------------------------------------------------------------ nesting, chain-dp, sniffing
def test_deeply_nested_meta_is_dropped_not_recursed(tmp_path):
    deep: object = 1
    for _ in range(5000):
        deep = {"d": deep}
    doc = chain_doc()
    doc["meta"] = {"deep": deep, "note": "kept", "info": {"k": "v"}, "nan": [float("nan")]}
    path = write_json(tmp_path, json.dumps(doc))
    res = run("info", path, "--format", "json", "--no-decompose")
    assert res.exit_code == 0, res.output
    g = load_graph(path)
    assert "deep" not in g.meta and "nan" not in g.meta and g.meta["note"] == "kept"
    out = tmp_path / "c.json"
    assert run("convert", path, out).exit_code == 0


def test_chain_dp_declines_a_workspace_no_table_level_holds(tmp_path):
    doc = chain_doc(ids=tuple(f"n{k}" for k in range(6)), mem=10)
    doc["nodes"][3]["workspace"] = 2**52
    doc["nodes"][0]["inputs"] = []
    g = remat_json.read(doc, source="t")
    train = build_training_graph(g, convention="checkmate")
    with pytest.raises(NoPlanError):
        make_plan(train, "chain-dp", train.lb)  # below store-all, at the lower bound
    res = run("plan", write_json(tmp_path, doc), "--training", "-s", "chain-dp", "-b", str(train.lb))
    assert res.exit_code in (0, 1), res.output
    assert "internal error" not in res.output


@pytest.mark.parametrize("prefix", [" " * 5000, "\n" * 4097, "\ufeff" + " \t\r\n" * 2000])
def test_content_after_long_leading_whitespace_is_sniffed(tmp_path, prefix):
    path = tmp_path / "g.data"
    path.write_text(prefix + json.dumps(chain_doc()), encoding="utf-8")
    assert load_graph(path).n == 3
    path.write_text(prefix + "p remat2\nnode 1 cpu 1 mem 4\n", encoding="utf-8")
    assert load_graph(path).n == 1


def test_a_file_of_only_whitespace_says_so(tmp_path):
    path = tmp_path / "g.json"
    path.write_text(" " * 10_000)
    assert "whitespace" in one_line(run("info", path), 2)
    path.write_text("")
    assert "empty" in one_line(run("info", path), 2)


def test_deep_json_graph_is_one_line(tmp_path):
    path = tmp_path / "g.json"
    path.write_text('{"format": "remat-graph", "nodes": ' + "[" * 100_000 + "]" * 100_000 + "}")
    one_line(run("info", path), 2)


def test_limits_are_what_the_messages_say():
    assert MAX_VALUE_BYTES == 2**53 and MAX_TOTAL_BYTES == 2**62 and math.isfinite(MAX_COST * 1e6)


# ------------------------------------------------------------------ properties: what remat writes
from tests.conftest import raw_dags  # noqa: E402


@settings(max_examples=25)
@given(raw=raw_dags(max_nodes=9), strategy=st.sampled_from(["store-all", "greedy", "chain-dp"]), ratio=st.sampled_from([None, 1.0, 0.8]))
def test_every_plan_remat_writes_validates_with_its_claims(tmp_path_factory, raw, strategy, ratio):
    """A plan file written by remat replays, and every claim in it holds."""
    from remat_cli.budget import parse_budget
    from remat_cli.plandoc import validate_claims, write_plan

    g = raw.build()
    try:
        plan = make_plan(g, strategy, None if ratio is None else parse_budget(f"{ratio}x"))
    except NoPlanError:
        return
    path = tmp_path_factory.mktemp("plan") / "p.json"
    write_plan(plan, path)
    schedule, header = read_plan(path, g)
    m = simulate(g, schedule).metrics
    assert m is not None and m.peak_bytes == plan.metrics.peak_bytes
    claims = validate_claims(header, g, m, path)
    assert claims.wrong is None and "metrics.peak_bytes" in claims.checked
    if plan.budget_bytes is not None:
        assert "budget_bytes" in claims.checked


@settings(max_examples=30)
@given(raw=raw_dags(max_nodes=9), scale=st.sampled_from([1.0, 0.5, 1e-7, 3e20]))
def test_twremat_text_reads_back_what_it_wrote(raw, scale):
    """twremat keeps sizes, costs, edges and targets (ids are renumbered, as documented)."""
    g = raw.build()
    g = Graph.from_arrays(
        ids=g.ids,
        ops=g.ops,
        kinds=g.kinds,
        mem=g.mem,
        cost=g.cost * scale,
        src=g.edges()[0],
        dst=g.edges()[1],
        targets=g.targets,
        fixed_mem=0,
    )
    back = twremat.read(twremat.dumps(g), source="t")
    assert back.n == g.n and back.mem.tolist() == g.mem.tolist()
    assert back.cost.tolist() == g.cost.tolist()
    assert back.targets.tolist() == g.targets.tolist()
    assert [sorted(p) for p in back.pred_lists] == [sorted(p) for p in g.pred_lists]


def test_onnx_estimated_sizes_beyond_int64_are_refused_naming_the_node(tmp_path):
    """Sizes estimated for values without shapes (Concat sums its inputs) can pass 2**63."""
    from onnx import helper

    from tests._onnx_models import model, save, tensor

    nodes = [
        helper.make_node("Frob", ["x"], ["f"], name="frob", domain="acme"),
        helper.make_node("Concat", ["f"] * 4096, ["y"], name="cat", axis=0),
    ]
    m = model(nodes, [tensor("x", [2**25, 2**25])], [tensor("y", None)])
    m.opset_import.append(helper.make_opsetid("acme", 1))
    res = run("info", save(m, tmp_path), "--no-decompose", "--inference")
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("remat: error")]
    assert len(errors) == 1 and "'cat'" in errors[0] and "2**53" in errors[0]
    assert all(ln.startswith("remat: ") for ln in res.output.splitlines() if ln.strip())
