"""Fuzzing through the CLI: hostile documents of every format keep the contract.

Each example writes one generated file (tests/fuzz_docs.py) and runs ``remat`` on it in
process. The answer must be exit 2 with exactly one ``remat: error:`` line, or a result
(exit 0/1) with no internal error, strict JSON, and a written plan that replays through
the simulator to the metrics it states (:func:`fuzz_docs.check_answer`). The larger,
seeded campaign with time and memory limits per input is ``scripts/fuzz.py``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fuzz_docs import GENERATORS, PLAN_GENERATORS, SAFE_GRAPH, Chooser, check_answer, check_validated
from remat_cli.cli import cli

# Modest counts keep CI fast; no shrinking, so that a failing class costs seconds, not
# minutes (the failing draws are printed; scripts/fuzz.py --save-dir keeps whole inputs).
FUZZ = settings(
    max_examples=int(os.environ.get("REMAT_FUZZ_EXAMPLES", "15")),
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


class DataChooser(Chooser):
    """Choices drawn from hypothesis, so a failing document shrinks to a small one."""

    def __init__(self, data: Any) -> None:
        self.data = data

    def choice(self, options):  # type: ignore[no-untyped-def]
        return self.data.draw(st.sampled_from(list(options)))

    def integer(self, lo: int, hi: int) -> int:
        return self.data.draw(st.integers(lo, hi))


def _run(args: list[str]) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, args, catch_exceptions=True)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        return 99, res.stdout, f"Traceback: {type(res.exception).__name__}: {res.exception}"
    return res.exit_code, res.stdout, res.stderr


def _assert_contract(args: list[str], **kw: Any) -> None:
    code, out, err = _run(args)
    verdict = check_answer(code, out, err, **kw)
    assert verdict.outcome in ("clean-error", "ok"), f"remat {' '.join(args)}: {verdict.outcome}: {verdict.detail}"


def _graph_case(kind: str, data: Any) -> None:
    name, content = GENERATORS[kind](DataChooser(data))
    strategy = data.draw(st.sampled_from(["store-all", "greedy", "chain-dp", "treewidth"]))
    budget = data.draw(st.sampled_from(["none", "0.8x", "1x", "100"]))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(content)
        _assert_contract(["info", str(path), "--no-decompose", "--format", "json"], json_out=True)
        _assert_contract(["info", str(path), "--no-decompose"])  # tables: names printed as they are
        plan_path = Path(tmp) / "out.plan.json"
        _assert_contract(
            ["plan", str(path), "-s", strategy, "-b", budget, "-o", str(plan_path), "--format", "json"],
            json_out=True,
            graph_path=path,
            plan_path=plan_path,
        )
        conv = Path(tmp) / "conv.json"
        code, out, err = _run(["convert", str(path), str(conv)])
        assert check_answer(code, out, err).outcome in ("clean-error", "ok"), err
        if code == 0:  # whatever remat writes, remat reads
            _assert_contract(["info", str(conv), "--no-decompose", "--format", "json"], json_out=True)


@FUZZ
@given(st.data())
def test_fuzz_remat_json(data: Any) -> None:
    _graph_case("remat-json", data)


@FUZZ
@given(st.data())
def test_fuzz_node_link(data: Any) -> None:
    _graph_case("node-link", data)


@FUZZ
@given(st.data())
def test_fuzz_twremat_text(data: Any) -> None:
    _graph_case("twremat", data)


@FUZZ
@given(st.data())
def test_fuzz_onnx(data: Any) -> None:
    _graph_case("onnx", data)


@FUZZ
@given(st.data(), st.sampled_from(sorted(PLAN_GENERATORS)))
def test_fuzz_plan_files(data: Any, kind: str) -> None:
    name, content = PLAN_GENERATORS[kind](DataChooser(data))
    with tempfile.TemporaryDirectory() as tmp:
        graph = Path(tmp) / "g.json"
        graph.write_text(json.dumps(SAFE_GRAPH))
        plan = Path(tmp) / name
        plan.write_bytes(content)
        code, out, err = _run(["validate", str(graph), str(plan), "--format", "json"])
        assert check_answer(code, out, err, json_out=True).outcome in ("clean-error", "ok"), (code, err)
        if code == 0:  # accepted: the plan is valid for the graph and its stated claims are true
            assert json.loads(out).get("fits", True)
            verdict = check_validated(graph, plan)
            assert verdict.outcome == "ok", verdict.detail
