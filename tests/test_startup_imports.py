"""What a `remat` process imports (issue 14 item 1: the fixed cost of every `remat plan`).

The registry lists every strategy the modules define without importing them; a plan with
one strategy imports that strategy's module only, and a JSON report imports no rich.
"""

from __future__ import annotations

import importlib
import json
import math
import pkgutil
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

import remat_cli.strategies as strategies_pkg
from remat_cli.strategies import REGISTRY, STRATEGIES, Strategy

ROOT = Path(__file__).resolve().parent.parent
STRATEGY_MODULES = {"auto", "chain_dp", "chen", "exact", "greedy", "min_memory", "pathwidth", "store_all", "treewidth"}


def _defined_strategies() -> dict[str, list[Strategy]]:
    """Every Strategy a module of remat_cli.strategies holds at its top level, by name (a
    name may have variants: auto's FIT_PROBE is auto run for a fit only)."""
    found: dict[str, list[Strategy]] = {}
    for info in pkgutil.iter_modules(strategies_pkg.__path__):
        module = importlib.import_module(f"remat_cli.strategies.{info.name}")
        for value in vars(module).values():
            if isinstance(value, Strategy) and not any(value is s for s in found.get(value.name, [])):
                found.setdefault(value.name, []).append(value)
    return found


def test_registry_lists_exactly_the_strategies_the_modules_define() -> None:
    defined = _defined_strategies()
    assert set(REGISTRY) == set(defined)
    assert list(STRATEGIES) == list(REGISTRY)
    for name, strategy in STRATEGIES.items():
        assert STRATEGIES[name] is strategy  # one object per name, lookup after lookup
        module, attribute, fold = REGISTRY[name]
        own = getattr(importlib.import_module(f"remat_cli.strategies.{module}"), attribute)
        assert any(own is s for s in defined[name])
        for f in {f.name for f in fields(Strategy)} - ({"solve"} if fold else set()):
            assert getattr(strategy, f) == getattr(own, f), (name, f)
        assert (strategy.solve is own.solve) == (not fold), name


def test_registry_behaves_as_a_dict_for_stand_ins() -> None:
    stand_in = next(iter(STRATEGIES.values()))
    extra = replace(stand_in, name="stand-in")
    STRATEGIES["stand-in"] = extra
    try:
        assert list(STRATEGIES)[-1] == "stand-in" and STRATEGIES["stand-in"] is extra
        assert "stand-in" in STRATEGIES
    finally:
        del STRATEGIES["stand-in"]
    assert "stand-in" not in STRATEGIES and list(STRATEGIES) == list(REGISTRY)


def _modules_after(args: list[str]) -> set[str]:
    """The modules imported by a `remat ARGS` process (run in-process via cli.main)."""
    code = (
        "import sys\n"
        "from remat_cli.cli import main\n"
        f"sys.argv = ['remat', *{args!r}]\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(out.stderr.strip().splitlines()[-1].split())


def test_a_plan_imports_only_its_strategy_and_no_rich_for_json() -> None:
    mods = _modules_after(["plan", "sample_graphs/unet_train.json", "-s", "treewidth", "-b", "0.7x", "--format", "json"])
    loaded = {m.rsplit(".", 1)[1] for m in mods if m.startswith("remat_cli.strategies.")}
    assert "treewidth" in loaded
    assert not loaded & (STRATEGY_MODULES - {"treewidth", "store_all"}), loaded  # store-all: the x budget's reference
    assert not any(m == "rich" or m.startswith("rich.") for m in mods)
    assert "remat_cli.attention" not in mods  # a graph without attention facts


def test_a_json_tradeoff_imports_no_rich() -> None:
    mods = _modules_after(["tradeoff", "sample_graphs/unet_train.json", "-n", "2", "--format", "json"])
    assert not any(m == "rich" or m.startswith("rich.") for m in mods)


def test_listing_strategies_names_every_one() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "remat_cli", "strategies", "--format", "json"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert [row["name"] for row in json.loads(out.stdout)] == list(REGISTRY)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.integers(0, 2**62).map(float), min_size=1, max_size=9))
@example([1.7e308, 1.7e308])  # the middle two overflow: inf from both
@example([-math.inf, math.inf])  # NaN from both
def test_plain_median_is_numpys_bit_for_bit(values: list[float]) -> None:
    import numpy as np

    from remat_cli.training import _median

    # where the middle two overflow (or are -inf and inf) numpy warns; _median gives the same
    # inf (or NaN) silently, and the values are what is compared
    with np.errstate(all="ignore"):
        want = float(np.median(values))
    got = _median(values)
    assert got == want or (got != got and want != want)  # NaN: np.median says NaN too


def test_an_onnx_plan_imports_no_numpy_ma() -> None:
    mods = _modules_after(["plan", "sample_graphs/resnet18.onnx", "--dim", "batch=8", "-s", "treewidth", "-b", "0.8x", "--format", "json"])
    assert "onnx" in mods and "remat_cli.training" in mods
    assert "numpy.ma" not in mods  # np.median's first call imports it (and inspect, tokenize)


def test_plan_with_auto_does_not_import_numpy_ma(tmp_path: Path) -> None:
    """numpy.ma (about 10 ms, pulled in by np.unique) is needed neither to load a graph file
    that names its targets nor to plan it with auto."""
    from remat_cli import generators as G
    from remat_cli.loaders import remat_json
    from remat_cli.training import checkmate_training_graph

    text = remat_json.dumps(checkmate_training_graph(G.skip_chain(30, skip=3)))
    assert '"targets"' in text
    path = tmp_path / "g.json"
    path.write_text(text)
    assert "numpy.ma" not in _modules_after(["plan", str(path), "-s", "auto", "-b", "0.6x", "--format", "json"])


def test_the_entry_point_leaves_without_collecting_what_it_made() -> None:
    """`remat` (remat_cli.__main__.main) freezes the objects alive at exit, so the
    collections of interpreter shutdown skip them; the output is as before."""
    code = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count(), file=sys.stderr))\n"  # runs after main's
        "sys.argv = ['remat', 'plan', 'sample_graphs/training_chain_32.json', '-s', 'chen-sqrt', '-b', '0.6x']\n"
        "from remat_cli.__main__ import main\n"
        "main()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "plan for" in out.stdout and "overhead" in out.stdout
    frozen = int(out.stderr.split("frozen")[-1])
    assert frozen > 10_000  # numpy, click and the plan's objects, at least


def test_piped_table_reports_import_no_rich() -> None:
    """`remat plan` and `remat info` tables on a pipe are drawn without rich (what they
    print is rich's text: tests/test_plain_tables.py)."""
    for args in (
        ["plan", "sample_graphs/training_chain_32.json", "-s", "chen-sqrt", "-b", "0.6x"],
        ["info", "sample_graphs/unet_train.json"],
    ):
        mods = _modules_after(args)
        assert not any(m == "rich" or m.startswith("rich.") for m in mods), args
