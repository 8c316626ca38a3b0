"""Strategies hand up typed facts in ``StrategyResult.info``, never display text: sizes and
changes are :class:`~remat_cli.units.Fact` values (or inside a :class:`~remat_cli.units.Phrase`),
and the one renderer, :func:`~remat_cli.units.say`, turns them into the words that plan
tables, ``-v`` and plan JSON have always shown."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as G
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.loaders import load_graph
from remat_cli.plandoc import plan_to_json
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.training import checkmate_training_graph
from remat_cli.units import Fact, Phrase, fmt_bytes, say

SAMPLES = Path(__file__).resolve().parent.parent / "sample_graphs"

#: A size or change already turned into words ("1.50 MiB", "17 B", "+12.34%"): the
#: renderer's job, so no strategy may put one in ``info``.
FORMATTED = re.compile(r"\d+(\.\d+)? (B|KiB|MiB|GiB|TiB|PiB)\b|[+-]\d+(\.\d+)?%")

STRATEGIES = ("auto", "treewidth", "pathwidth", "chain-dp", "chen-greedy", "greedy", "dtr", "min-memory")


def _formatted_text(value: Any) -> list[str]:
    """Every piece of ``value`` that is a number already formatted as text."""
    if isinstance(value, Fact):
        return [] if isinstance(value.value, (int, float)) else [repr(value)]
    if isinstance(value, Phrase):
        found = [value.template] if FORMATTED.search(value.template) else []
        return found + [x for a in value.args for x in _formatted_text(a)]
    if isinstance(value, str):
        return [value] if FORMATTED.search(value) else []
    if isinstance(value, (list, tuple)):
        return [x for a in value for x in _formatted_text(a)]
    return []


def test_say_renders_each_kind_and_leaves_plain_values() -> None:
    assert say(Fact(1536, "bytes")) == "1.50 KiB" == fmt_bytes(1536)
    assert say(Fact(17, "bytes")) == "17 B"
    assert say(Fact(0.12345, "change")) == "+12.35%" and say(Fact(-0.5, "change")) == "-50.00%"
    inner = Phrase("over budget ({})", (Fact(3 << 20, "bytes"),))
    assert say(Phrase("{}: {}; {}", (2, inner, "a {b} c"))) == "2: over budget (3.00 MiB); a {b} c"
    for plain in (3, 0.25, "text", None, ["a", "b"]):
        assert say(plain) == plain


def _family(kind: str, n: int, seed: int) -> Graph:
    g = {"chain": G.chain, "ladder": lambda k: G.ladder(max(2, k // 2)), "dag": lambda k: G.random_dag(k, p=0.25, seed=seed)}[kind](n)
    return checkmate_training_graph(g) if seed % 2 else g


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.builds(_family, st.sampled_from(("chain", "ladder", "dag")), st.integers(4, 14), st.integers(0, 20)),
    st.sampled_from(STRATEGIES),
    st.sampled_from((0.5, 0.7, 0.9)),
)
def test_strategies_hand_up_facts_not_formatted_text(g: Graph, name: str, ratio: float) -> None:
    """make_plan simulates the schedule; its info holds numbers and facts, and the plan
    JSON (what files and --format json carry) holds the facts in words, as plain JSON."""
    budget = max(int(ratio * store_all_peak(g)), g.lb)
    try:
        plan = make_plan(g, name, budget)
    except NoPlanError:
        return
    assert plan.metrics.peak_bytes <= budget
    bad = {k: _formatted_text(v) for k, v in plan.info.items() if _formatted_text(v)}
    assert not bad, f"{name} put formatted numbers in info: {bad}"
    doc = json.loads(json.dumps(plan_to_json(plan)["info"]))
    for key, value in plan.info.items():
        if isinstance(value, (Fact, Phrase)):
            assert doc[key] == say(value) and isinstance(doc[key], str)


def _info(path: str, strategy: str, ratio: float) -> dict[str, Any]:
    g = load_graph(str(SAMPLES / path))
    plan = make_plan(g, strategy, int(ratio * store_all_peak(g)))
    info = plan_to_json(plan)["info"]
    return {k: v for k, v in info.items() if "seconds" not in k}


def test_plan_json_info_reads_as_before_the_facts() -> None:
    """The words of plan JSON files are unchanged: literals recorded from the code that
    formatted inside the strategies (timing fields left out)."""
    assert _info("training_chain_32.json", "chen-greedy", 0.5) == {"segments": 33, "groups": 11, "threshold": "2 B"}
    assert _info("unet_train.json", "treewidth", 0.5) == {
        "decomposition": "tree (min-fill)",
        "width": 5,
        "separator depth": 5,
        "bare bound (w+1)(depth+1)": 36,
        "bare peak (bytes)": 603979776,
        "mode": "budgeted recursion with cache (cheap evicted first) and prefetch at 495 MiB + memory-limit pass + keep moves",
        "runs stopped once costlier than the best": 1,  # r6: prefetch ladder runs are capped too
        "candidates tried": 7,
        "peak (values)": 24,
    }
    auto = _info("training_chain_32.json", "auto", 0.5)
    assert auto["winner"] == "treewidth"
    assert auto["mode"] == "budgeted recursion with cache (recent evicted first) and prefetch at 17 B + memory-limit pass"
    assert auto["tried"] == (
        "store-all over budget (34 B), treewidth +17.53%, pathwidth +17.53%, chen-sqrt +23.71%, chen-greedy +20.62%, "
        "chain-dp +17.53%, greedy no fit, dtr +17.53%, min-memory skipped (a cheaper plan fits)"
    )


def test_a_stopped_recursion_reads_as_before(monkeypatch) -> None:
    """The fallback when the bare recursion passes its work limit: the reason comes from
    the stopped run as data, and reads as the text the strategy used to build."""
    from remat_cli.strategies import treewidth as T

    monkeypatch.setattr(T, "WORK_FLOOR", 10)
    monkeypatch.setattr(T, "WORK_PER_NODE", 0)
    g = checkmate_training_graph(G.random_dag(14, p=0.4, seed=3))
    plan = make_plan(g, "treewidth", None)
    info = plan_to_json(plan)["info"]
    assert info["mode"] == "store-all: the bare recursion stopped at its work limit"
    assert info["work limit (units)"] == 10 and plan.info["mode"].args == ("work limit",)
