"""`remat batch`: discovery by content, error rows, deterministic parallel output, --resume,
--out-dir plans (replayed by the simulator), --fail-fast, timeouts, crashes and Ctrl-C."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from remat_cli import generators, training
from remat_cli.batch import (
    BAD_INPUT,
    CRASH,
    NO_PLAN,
    OK,
    TIMEOUT,
    TOO_LARGE,
    FileResult,
    FileTask,
    Row,
    RowWriter,
    discover,
    file_sha256,
    make_tasks,
    plan_file,
    read_rows,
    run_batch,
)
from remat_cli.budget import parse_budget
from remat_cli.cli import cli
from remat_cli.executors import LocalExecutor
from remat_cli.loaders import load_graph
from remat_cli.loaders import remat_json, twremat
from remat_cli.plandoc import read_plan
from remat_cli.planner import store_all_peak
from remat_cli.simulate import simulate

REPO = Path(__file__).resolve().parents[1]
GOOD = ["a/dag0.json", "a/dag1.json", "a/deep/chain.txt", "b/nodelink.json", "b/dag2.json"]
BROKEN = ["a/broken.json", "a/cycle.json", "b/empty.onnx", "b/garbage.onnx", "b/nomem.json"]
IGNORED = ["a/notes.txt", "b/package.json", "b/old.plan.json", ".hidden/dag.json", "a/.dot.json", "b/results.jsonl", "b/results.csv"]


def _write_graph(path: Path, seed: int, n: int = 14) -> None:
    g = training.checkmate_training_graph(generators.random_dag(n, 0.25, seed=seed, max_size=5))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(remat_json.dumps(g))


def make_tree(root: Path) -> Path:
    """A directory of good graphs in every text format, broken files, and non-graphs."""
    for k, rel in enumerate(["a/dag0.json", "a/dag1.json", "b/dag2.json", ".hidden/dag.json"]):
        _write_graph(root / rel, seed=k)
    (root / "a/deep").mkdir(parents=True)
    (root / "a/deep/chain.txt").write_text(twremat.dumps(generators.chain(9, mem=3)))
    nodes = [{"id": i, "name": f"n{i}", "backward": i >= 3, "cost_cpu": 1 + i, "cost_ram": 2 + i % 3} for i in range(6)]
    links = [{"source": i, "target": i + 1} for i in range(5)] + [{"source": 0, "target": 5}]
    (root / "b/nodelink.json").write_text(json.dumps({"directed": True, "nodes": nodes, "links": links}))
    (root / "a/broken.json").write_text('{"format": "remat-graph", "nodes": [')
    (root / "a/cycle.json").write_text(
        json.dumps({"format": "remat-graph", "nodes": [{"id": "x", "inputs": ["y"], "mem": 1}, {"id": "y", "inputs": ["x"], "mem": 1}]})
    )
    (root / "b/empty.onnx").write_bytes(b"")
    (root / "b/garbage.onnx").write_bytes(b"\x08\x07garbage that is not a protobuf model\xff\xfe")
    (root / "b/nomem.json").write_text(json.dumps({"format": "remat-graph", "nodes": [{"id": "x", "inputs": []}]}))
    (root / "a/notes.txt").write_text("some notes, not a graph\n")
    (root / "b/package.json").write_text('{"name": "not-a-graph", "version": "1.0"}')
    (root / "b/old.plan.json").write_text(json.dumps({"format": "remat-plan", "version": 1, "schedule": [], "nodes": []}))
    (root / "a/.dot.json").write_text((root / "a/dag0.json").read_text())
    row = Row(file="x.json", strategy="store-all", budget="none", status=OK, nodes=3)
    (root / "b/results.jsonl").write_text(json.dumps(row.to_record()) + "\n")  # earlier output
    (root / "b/results.csv").write_text("file,strategy,nodes\nx.json,store-all,3\n")
    return root


def _rel(root: Path, files: list[str]) -> list[str]:
    return sorted(Path(f).relative_to(root).as_posix() for f in files)


def _records(path: Path, drop: tuple[str, ...] = ("solve_seconds",)) -> list[dict]:
    if path.suffix == ".csv":
        with path.open() as fh:
            rows = list(csv.DictReader(fh))
    else:
        rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in drop} for r in rows]


# --------------------------------------------------------------------------- discovery


def test_discover_finds_graphs_by_content_and_skips_the_rest(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "models")
    found = _rel(root, discover([root]))
    assert found == sorted(GOOD + BROKEN)
    assert not set(found) & set(IGNORED)
    assert _rel(root, discover([root], globs=["*.onnx"])) == ["b/empty.onnx", "b/garbage.onnx"]
    assert _rel(root, discover([root], globs=["a/deep/*"])) == ["a/deep/chain.txt"]
    # a file named directly is always taken; order is by path components, files deduplicated
    direct = discover([root / "a/notes.txt", root / "a", root / "a/dag0.json"])
    assert _rel(root, direct) == sorted(["a/notes.txt"] + [f for f in GOOD + BROKEN if f.startswith("a/")])


# --------------------------------------------------------------------------- rows and exit codes


def test_prepare_batch_decides_the_run_before_any_work(tmp_path: Path) -> None:
    """`remat batch` as a library call: a request that cannot run is refused when made,
    and preparing finds the files, loosens --dim for many files, and reads what --resume
    may reuse (the JSON lines, else the CSV) without planning anything."""
    from remat_cli.batch import BatchRequest, prepare_batch
    from remat_cli.errors import InputError
    from remat_cli.loaders import LoadOptions

    root = make_tree(tmp_path / "models")
    none = (parse_budget("none"),)
    with pytest.raises(InputError, match="unknown strategy 'nope'"):
        BatchRequest(paths=(str(root),), load=LoadOptions(), strategies=("nope",), budgets=none)
    with pytest.raises(InputError, match="--resume needs --jsonl or --csv"):
        BatchRequest(paths=(str(root),), load=LoadOptions(), budgets=none, resume=True)
    load = LoadOptions(dims=(("batch", 8),))
    job = prepare_batch(BatchRequest(paths=(str(root),), load=load, strategies=("store-all",), budgets=none))
    assert list(job.files) == discover([root]) and [t.path for t in job.tasks] == list(job.files)
    assert all(t.load.dims == load.dims and not t.load.strict_dims for t in job.tasks) and job.previous == ()
    one = prepare_batch(BatchRequest(paths=(str(root / "a/dag0.json"),), load=load, strategies=("store-all",), budgets=none))
    assert one.tasks[0].load.strict_dims  # one file: a --dim it lacks is an error, as for `plan`
    (tmp_path / "r.jsonl").write_text("")
    writer = RowWriter(tmp_path / "r.csv")
    writer.append([Row(file="x.json", strategy="store-all", budget="none", status=OK, nodes=3)])
    writer.close()
    resumed = prepare_batch(
        BatchRequest(
            paths=(str(root),),
            load=load,
            budgets=none,
            resume=True,
            jsonl_path=str(tmp_path / "r.jsonl"),
            csv_path=str(tmp_path / "r.csv"),
        )
    )
    assert [(r.file, r.nodes) for r in resumed.previous] == [("x.json", 3)]
    with pytest.raises(InputError, match="no graph files found"):
        prepare_batch(BatchRequest(paths=(str(root),), load=load, budgets=none, globs=("*.nothing",)))


def test_discovery_takes_exactly_what_the_loaders_read(tmp_path: Path) -> None:
    """Discovery asks the loaders' format detection: a file it takes loads, in every
    spelling the loaders accept (comment lines before twremat text, a UTF-8 BOM before
    JSON), and text the loaders refuse is not taken, even when named .json."""
    root = tmp_path / "m"
    root.mkdir()
    chain = generators.chain(5, mem=3)
    (root / "commented.txt").write_text("# exported by a tool\n\n" + twremat.dumps(chain))
    (root / "bom.json").write_bytes(b"\xef\xbb\xbf" + remat_json.dumps(chain).encode())
    (root / "tsconfig.json").write_text("// comments: not JSON, and no graph\n{}\n")
    (root / "notes.txt").write_text("# a heading\na list of nodes, not twremat: no graph either\n")
    found = _rel(root, discover([root]))
    assert found == ["bom.json", "commented.txt"]
    for rel in found:
        assert load_graph(root / rel).n == chain.n


def test_mixed_directory_gives_expected_rows_and_exit_code(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "models")
    out = tmp_path / "out.jsonl"
    plans = tmp_path / "plans"
    res = CliRunner().invoke(cli, ["batch", str(root), "-j", "2", "--jsonl", str(out), "--out-dir", str(plans), "--format", "json"])
    assert res.exit_code == 1, res.output
    rows = [Row.from_record(r) for r in json.loads(res.stdout)]
    assert rows == read_rows(out)
    by_file = {Path(r.file).relative_to(root).as_posix(): r for r in rows}
    assert sorted(by_file) == sorted(GOOD + BROKEN)
    assert [r.file for r in rows] == sorted((r.file for r in rows), key=lambda f: Path(f).parts)
    for rel in BROKEN:
        r = by_file[rel]
        assert r.status == BAD_INPUT and r.message.startswith(str(root / rel)), r
        assert "\n" not in r.message and "Traceback" not in r.message
    assert "cycle" in by_file["a/cycle.json"].message
    assert "mem" in by_file["b/nomem.json"].message
    for rel in GOOD:
        r = by_file[rel]
        assert r.status == OK, r
        graph = load_graph(root / rel)
        assert (r.nodes, r.edges) == (graph.n, graph.num_edges)
        assert r.store_all_peak_bytes == store_all_peak(graph)
        # the written plan replays, on the simulator, to the row's figures
        schedule, header = read_plan(plans / r.plan_file, graph)
        sim = simulate(graph, schedule)
        assert sim.error is None and sim.metrics is not None
        assert sim.metrics.peak_bytes == r.peak_bytes == header["metrics"]["peak_bytes"]
        assert sim.metrics.recomputations == r.recomputations
    assert "with failures" in res.stderr


def test_all_good_files_exit_0_and_budget_sweep_rows(tmp_path: Path) -> None:
    root = tmp_path / "ok"
    for k in range(3):
        _write_graph(root / f"g{k}.json", seed=10 + k)
    res = CliRunner().invoke(cli, ["batch", str(root), "-j", "1", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert [r["status"] for r in json.loads(res.stdout)] == [OK] * 3
    # a sweep: one row per file and budget; store-all fits 1x and not 0.5x
    res = CliRunner().invoke(cli, ["batch", str(root), "-j", "2", "-s", "store-all", "--budgets", "1x,0.5x", "--format", "json"])
    assert res.exit_code == 1
    rows = [Row.from_record(r) for r in json.loads(res.stdout)]
    assert [(Path(r.file).name, r.budget, r.status) for r in rows] == [
        (f"g{k}.json", b, s) for k in range(3) for b, s in (("1x", OK), ("0.5x", NO_PLAN))
    ]
    for r in rows:
        assert r.budget_bytes == (r.store_all_peak_bytes if r.budget == "1x" else r.store_all_peak_bytes // 2)
        if r.status == OK:
            assert r.peak_bytes is not None and r.peak_bytes <= r.budget_bytes
        else:
            # store-all ignores budgets: the smallest it meets is its peak (or LB, if above the budget)
            assert r.peak_bytes is None and r.min_budget_bytes > r.budget_bytes
            expected = r.lower_bound_bytes if r.budget_bytes < r.lower_bound_bytes else r.store_all_peak_bytes
            assert r.min_budget_bytes == expected


def test_bad_usage_exits_2(tmp_path: Path) -> None:
    root = tmp_path / "ok"
    _write_graph(root / "g.json", seed=1)
    runner = CliRunner()
    assert runner.invoke(cli, ["batch", str(root), "-s", "no-such-strategy"]).exit_code == 2
    assert runner.invoke(cli, ["batch", str(tmp_path / "missing")]).exit_code == 2
    assert runner.invoke(cli, ["batch", str(root), "--resume"]).exit_code == 2
    assert runner.invoke(cli, ["batch", str(root), "--budgets", "1x,lots"]).exit_code == 2
    assert runner.invoke(cli, ["batch", str(root), "--scheduler", "tcp://x:1"]).exit_code == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    res = runner.invoke(cli, ["batch", str(empty)])
    assert res.exit_code == 2 and "no graph files" in res.stderr


def test_j1_and_j2_give_identical_outputs(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "models")
    outs = {}
    for jobs in ("1", "2"):
        jsonl, csv_path = tmp_path / f"j{jobs}.jsonl", tmp_path / f"j{jobs}.csv"
        res = CliRunner().invoke(
            cli, ["batch", str(root), "-j", jobs, "--budgets", "none,0.8x", "--jsonl", str(jsonl), "--csv", str(csv_path)]
        )
        assert res.exit_code == 1
        outs[jobs] = (_records(jsonl), _records(csv_path), res.stdout.replace(f"{jobs} local worker", "N local worker"))
    assert outs["1"][0] == outs["2"][0] and len(outs["1"][0]) == 2 * len(GOOD + BROKEN)
    assert outs["1"][1] == outs["2"][1]
    # CSV and JSON lines carry the same rows
    assert [Row.from_record(r) for r in outs["1"][1]] == [Row.from_record(r) for r in outs["1"][0]]
    # the table differs only in the solve-time column
    first_columns = lambda text: [line.split()[:5] for line in text.splitlines()[1:]]
    assert first_columns(outs["1"][2]) == first_columns(outs["2"][2])


# --------------------------------------------------------------------------- resume


def test_resume_recomputes_only_changed_files(tmp_path: Path) -> None:
    root = tmp_path / "models"
    for k in range(5):
        _write_graph(root / f"g{k}.json", seed=k)
    (root / "bad.json").write_text("{not json")
    out = tmp_path / "out.jsonl"
    files = discover([root])
    budgets = [parse_budget("none"), parse_budget("0.9x")]

    def run(previous: list[Row], **kw) -> tuple[list[str], list[Row]]:
        computed: list[str] = []
        tasks = make_tasks(discover([root]), strategies=["store-all"], budgets=budgets, **kw)
        writer = RowWriter(out)
        try:
            result = run_batch(
                tasks,
                executor=LocalExecutor(2),
                previous=previous,
                writers=[writer],
                on_done=lambda task, _r: computed.append(Path(task.path).name),
            )
        finally:
            writer.close()
        assert result.reused == len(tasks) - len(computed)
        return sorted(computed), list(result.rows)

    computed, first = run([])
    assert computed == sorted(Path(f).name for f in files)
    assert read_rows(out) == first
    computed, again = run(read_rows(out))
    assert computed == [] and again == first
    # change one graph, add one, leave the broken one alone: only those two are planned
    _write_graph(root / "g2.json", seed=99)
    _write_graph(root / "g9.json", seed=9)
    computed, third = run(read_rows(out))
    assert computed == ["g2.json", "g9.json"]
    unchanged = lambda rows: [r for r in rows if not r.file.endswith(("g2.json", "g9.json"))]
    assert unchanged(third) == unchanged(first) and len(unchanged(first)) == 10
    assert read_rows(out) == third
    # other options are another key: everything is planned again
    computed, _ = run(read_rows(out), max_nodes=10**6)
    assert len(computed) == 7


def test_resume_through_the_cli_with_csv(tmp_path: Path) -> None:
    root = tmp_path / "models"
    for k in range(3):
        _write_graph(root / f"g{k}.json", seed=k)
    out = tmp_path / "out.csv"
    runner = CliRunner()
    assert runner.invoke(cli, ["batch", str(root), "--csv", str(out)]).exit_code == 0
    before = _records(out, drop=())
    _write_graph(root / "g1.json", seed=50)
    res = runner.invoke(cli, ["batch", str(root), "--csv", str(out), "--resume"])
    assert res.exit_code == 0
    assert "(2 reused from earlier results)" in res.stderr
    after = _records(out, drop=())
    assert after[0] == before[0] and after[2] == before[2]  # byte-for-byte the same rows
    assert after[1]["key"] != before[1]["key"]


def test_torn_last_line_is_ignored(tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    row = Row(file="f.json", strategy="store-all", budget="none", status=OK, nodes=3, peak_bytes=10, overhead=0.0)
    out.write_text(json.dumps(row.to_record()) + "\n" + '{"file": "g.json", "stra')
    assert read_rows(out) == [row]
    assert read_rows(tmp_path / "missing.jsonl") == []


# --------------------------------------------------------------------------- robustness


def test_max_nodes_and_fail_fast(tmp_path: Path) -> None:
    root = tmp_path / "models"
    for k, n in enumerate([8, 30, 9]):
        _write_graph(root / f"g{k}.json", seed=k, n=n)
    res = CliRunner().invoke(cli, ["batch", str(root), "--max-nodes", "25", "--format", "json"])
    assert res.exit_code == 1
    rows = [Row.from_record(r) for r in json.loads(res.stdout)]
    assert [r.status for r in rows] == [OK, TOO_LARGE, OK]
    assert "more than --max-nodes 25" in rows[1].message and rows[1].nodes > 25
    # --fail-fast with one worker stops right after the first failing file
    (root / "a_bad.json").write_text("[")
    res = CliRunner().invoke(cli, ["batch", str(root), "-j", "1", "--fail-fast", "--format", "json"])
    assert res.exit_code == 1
    rows = [Row.from_record(r) for r in json.loads(res.stdout)]
    assert [Path(r.file).name for r in rows] == ["a_bad.json"]
    assert "--fail-fast" in res.stderr


def plan_or_abort(task: FileTask) -> FileResult:
    """A per-file function that really crashes its worker on files named crash*."""
    if Path(task.path).name.startswith("crash"):
        os.abort()
    return plan_file(task)


def test_a_crashing_worker_becomes_a_row_and_the_rest_completes(tmp_path: Path) -> None:
    root = tmp_path / "models"
    for name in ("a.json", "crash.json", "z.json"):
        _write_graph(root / name, seed=len(name))
    tasks = make_tasks(discover([root]), strategies=["store-all"], budgets=[parse_budget("none")])
    result = run_batch(tasks, executor=LocalExecutor(1), work=plan_or_abort)
    assert [(Path(r.file).name, r.status) for r in result.rows] == [("a.json", OK), ("crash.json", CRASH), ("z.json", OK)]
    assert "SIGABRT" in result.rows[1].message


def _big_twremat(path: Path, n: int) -> None:
    lines = ["p remat2", "node 0 cpu 1 mem 1"] + [f"node {i} deps {i - 1} cpu 1 mem 1" for i in range(1, n)]
    path.write_text("\n".join(lines) + "\n")


def test_timeout_kills_a_slow_file_and_the_rest_completes(tmp_path: Path) -> None:
    root = tmp_path / "models"
    _write_graph(root / "a.json", seed=1)
    _big_twremat(root / "m_big.txt", 200_000)  # seconds to load and plan: far past the limit
    _write_graph(root / "z.json", seed=2)
    out = tmp_path / "out.csv"
    res = CliRunner().invoke(cli, ["batch", str(root), "-j", "2", "--timeout", "1.5", "--csv", str(out), "--format", "json"])
    assert res.exit_code == 1
    rows = [Row.from_record(r) for r in json.loads(res.stdout)]
    assert [(Path(r.file).name, r.status) for r in rows] == [("a.json", OK), ("m_big.txt", TIMEOUT), ("z.json", OK)]
    assert "1.5 s" in rows[1].message
    assert [Row.from_record(r) for r in _records(out, drop=())] == rows


def test_ctrl_c_stops_workers_and_keeps_results_so_far(tmp_path: Path) -> None:
    root = tmp_path / "models"
    for k in range(40):
        _write_graph(root / f"g{k:02d}.json", seed=k, n=300)
    out = tmp_path / "out.jsonl"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "remat_cli",
            "batch",
            str(root),
            "-j",
            "1",
            "-s",
            "store-all",
            "--budgets",
            "none,0.9x,0.8x",
            "--jsonl",
            str(out),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and out.read_text().count("\n") >= 3:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
    _stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert b"interrupted" in stderr and b"Traceback" not in stderr
    rows = read_rows(out)
    lines = out.read_text().splitlines()
    assert len(rows) == len(lines)  # well-formed: every line is a record
    files = sorted({r.file for r in rows})
    assert 1 <= len(files) < 40
    assert len(rows) == 3 * len(files)  # whole files only, in order
    assert [r.file for r in rows] == sorted((r.file for r in rows), key=lambda f: Path(f).parts)
    # and a resumed run finishes the job, reusing what the interrupted one kept
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "remat_cli",
            "batch",
            str(root),
            "-s",
            "store-all",
            "--budgets",
            "none,0.9x,0.8x",
            "--jsonl",
            str(out),
            "--resume",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert f"({len(files)} reused" in res.stderr
    assert len(read_rows(out)) == 120


# --------------------------------------------------------------------------- dask


def test_dask_executor_gives_the_same_rows_as_local(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    root = make_tree(tmp_path / "models")
    local = tmp_path / "local.jsonl"
    assert CliRunner().invoke(cli, ["batch", str(root), "-j", "2", "--jsonl", str(local)]).exit_code == 1
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        remote = tmp_path / "dask.jsonl"
        res = CliRunner().invoke(
            cli, ["batch", str(root), "--executor", "dask", "--scheduler", cluster.scheduler_address, "--jsonl", str(remote)]
        )
        assert res.exit_code == 1, res.output
        assert _records(remote) == _records(local)
        # with a timeout each file runs in a child process on its worker
        tasks = make_tasks(discover([root / "a"]), strategies=["store-all"], budgets=[parse_budget("none")])
        from remat_cli.executors import DaskExecutor

        result = run_batch(tasks, executor=DaskExecutor(cluster.scheduler_address, timeout=60))
        assert [r.status for r in result.rows] == [r.status for r in run_batch(tasks, executor=LocalExecutor(1)).rows]


# --------------------------------------------------------------------------- terminal views


@pytest.mark.parametrize("name", ["a[/]b.json", "[bold]x.json", "e\x1b[31mred.json"])
def test_the_progress_bar_shows_a_file_name_as_it_is(tmp_path: Path, name: str) -> None:
    """The bar's current-file column reads rich markup: a file named ``a[/]b.json`` crashed
    it (MarkupError), ``[bold]`` styled it; an escape sequence reached the terminal."""
    import io

    from rich.console import Console

    from remat_cli.report.batch_view import BatchProgress

    _write_graph(tmp_path / "m" / name, seed=3)
    tasks = make_tasks(discover([tmp_path / "m"]), strategies=["store-all"], budgets=[parse_budget("none")])
    buf = io.StringIO()
    with BatchProgress(Console(file=buf, force_terminal=True, width=200), len(tasks)) as progress:
        progress.start(tasks[0])
        progress._progress.refresh()  # (drawn now, not on the bar's own clock)
        assert name.replace("\x1b", "\\x1b") in buf.getvalue()
        assert "\x1b[31mred" not in buf.getvalue()


def test_progress_bar_and_table_on_a_terminal(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from remat_cli.report.batch_view import BatchProgress, render_rows

    root = tmp_path / "m"
    _write_graph(root / "good.json", seed=3)
    (root / "bad.json").write_text("[")
    tasks = make_tasks(discover([root]), strategies=["store-all"], budgets=[parse_budget("none")])
    buf = io.StringIO()
    term = Console(file=buf, force_terminal=True, width=120)
    with BatchProgress(term, len(tasks)) as progress:
        result = run_batch(tasks, executor=LocalExecutor(1), on_start=progress.start, on_done=progress.done)
    assert progress.failures == 1 and not progress.running
    assert "planning" in buf.getvalue() and "1 failed" in buf.getvalue()
    # piped: nothing on stderr
    piped = Console(file=io.StringIO(), force_terminal=False)
    assert not BatchProgress(piped, 3).enabled
    out = io.StringIO()
    render_rows(result.rows, Console(file=out, force_terminal=False), "t")
    lines = out.getvalue().splitlines()
    assert lines[0] == "t" and lines[1].split()[:4] == ["file", "strategy", "budget", "status"]
    assert lines[-1].startswith(str(root / "bad.json")) and "bad-input: not valid JSON" in lines[-1]
    assert all(line == line.rstrip() for line in lines)


# --------------------------------------------------------------------------- property


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kinds=st.lists(st.sampled_from(["dag", "chain", "broken", "cycle"]), min_size=1, max_size=7),
    jobs=st.integers(1, 3),
    budgets=st.lists(st.sampled_from(["none", "1x", "0.7x", "40"]), min_size=1, max_size=3, unique=True),
)
def test_parallel_rows_equal_serial_in_process_rows(tmp_path_factory, kinds, jobs, budgets) -> None:
    """Whatever the files, -j and budgets: the workers' rows are the in-process rows, in order."""
    root = tmp_path_factory.mktemp("prop")
    for k, kind in enumerate(kinds):
        path = root / f"f{k}.json"
        if kind == "dag":
            _write_graph(path, seed=k, n=6 + k)
        elif kind == "chain":
            path.write_text(remat_json.dumps(training.checkmate_training_graph(generators.chain(3 + k, mem=k + 1))))
        elif kind == "broken":
            path.write_text('{"format": "remat-graph", "nodes": [{"id": 1}]')
        else:
            path.write_text(
                json.dumps(
                    {"format": "remat-graph", "nodes": [{"id": "a", "inputs": ["b"], "mem": 1}, {"id": "b", "inputs": ["a"], "mem": 1}]}
                )
            )
    tasks = make_tasks(discover([root]), strategies=["store-all"], budgets=[parse_budget(b) for b in budgets])
    result = run_batch(tasks, executor=LocalExecutor(jobs))
    serial = [r for t in tasks for r in plan_file(t).rows]
    untimed = lambda rows: [r.to_record() | {"solve_seconds": None} for r in rows]
    assert untimed(result.rows) == untimed(serial)
    for r in result.rows:
        if r.status == OK:
            assert r.budget_bytes is None or r.peak_bytes <= r.budget_bytes
        assert r.status in (OK, NO_PLAN, BAD_INPUT)


def test_one_dim_list_serves_models_with_and_without_that_dimension(tmp_path: Path) -> None:
    """`--dim sequence=…` across a directory skips models that have no such dimension,
    while a single model still refuses an unknown name (a typo)."""
    import shutil

    from click.testing import CliRunner

    from remat_cli.cli import cli

    samples = REPO / "sample_graphs"
    for name in ("resnet18.onnx", "gpt2.onnx"):
        shutil.copy(samples / name, tmp_path / name)
    res = CliRunner().invoke(
        cli, ["batch", str(tmp_path), "-j", "1", "--dim", "batch=2", "--dim", "sequence=16", "--jsonl", str(tmp_path / "o.jsonl")]
    )
    rows = read_rows(tmp_path / "o.jsonl")
    assert res.exit_code == 0, res.output
    assert [r.status for r in rows] == ["ok", "ok"]
    single = CliRunner().invoke(cli, ["info", str(tmp_path / "resnet18.onnx"), "--dim", "batch=2", "--dim", "sequence=16"])
    assert single.exit_code == 2 and "no dimension named 'sequence'" in single.output


# --------------------------------------------------------------------------- hostile trees


def test_deeply_nested_json_is_one_row_and_the_good_files_are_planned(tmp_path: Path) -> None:
    root = tmp_path / "models"
    _write_graph(root / "a.json", seed=1)
    (root / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (root / "deep_graph.json").write_text('{"format": "remat-graph", "nodes": ' + "[" * 100_000 + "]" * 100_000 + "}")
    _write_graph(root / "z.json", seed=2)
    res = CliRunner().invoke(cli, ["batch", str(root), "-j", "1", "-s", "store-all", "--format", "json"])
    assert res.exit_code == 1, res.stderr
    rows = [Row.from_record(r) for r in json.loads(res.stdout)]
    status = {Path(r.file).name: r.status for r in rows}
    assert status == {"a.json": OK, "deep.json": BAD_INPUT, "deep_graph.json": BAD_INPUT, "z.json": OK}
    assert all("nested too deeply" in r.message for r in rows if r.status == BAD_INPUT)
    assert "4 of 4 files done" in res.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifos_become_rows_and_never_block_the_run(tmp_path: Path) -> None:
    root = tmp_path / "models"
    _write_graph(root / "a.json", seed=1)
    os.mkfifo(root / "pipe.json")
    os.mkfifo(tmp_path / "named.onnx")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "remat_cli",
            "batch",
            str(root),
            str(tmp_path / "named.onnx"),
            "-j",
            "1",
            "-s",
            "store-all",
            "--format",
            "json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    rows = [Row.from_record(r) for r in json.loads(proc.stdout)]
    assert {Path(r.file).name: r.status for r in rows} == {"a.json": OK, "pipe.json": BAD_INPUT, "named.onnx": BAD_INPUT}
    assert all("named pipe" in r.message for r in rows if r.status != OK)
    assert file_sha256(root / "pipe.json") == ""  # hashing does not block either


def test_an_unreadable_subdirectory_is_a_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "models"
    _write_graph(root / "a.json", seed=1)
    _write_graph(root / "locked" / "b.json", seed=2)
    locked = str(root / "locked")
    real_scandir, real_listdir = os.scandir, os.listdir

    def deny(path: object = ".") -> object:
        if os.fspath(path) == locked:  # type: ignore[arg-type]
            raise PermissionError(13, "Permission denied", locked)
        return real_scandir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", deny)
    files = discover([root])
    assert files == [str(root / "a.json"), locked]
    monkeypatch.setattr(os, "listdir", lambda p=".": deny(p) and real_listdir(p))
    tasks = make_tasks(files, strategies=["store-all"], budgets=[parse_budget("none")])
    rows = [r for t in tasks for r in plan_file(t).rows]
    assert [r.status for r in rows] == [OK, BAD_INPUT]
    assert "cannot list this directory" in rows[1].message and "Permission denied" in rows[1].message


def test_a_resumed_writer_keeps_what_is_there_until_it_finishes(tmp_path: Path) -> None:
    for suffix in (".jsonl", ".csv"):
        out = tmp_path / f"out{suffix}"
        first = [Row(file=f"f{k}.json", strategy="store-all", budget="none", status=OK, key=f"k{k}", nodes=k) for k in range(3)]
        writer = RowWriter(out)
        writer.append(first)
        writer.close()  # killed before finish(): the rows are there
        assert read_rows(out) == first
        with out.open("a") as fh:
            fh.write('{"file": "torn' if suffix == ".jsonl" else "torn.json,store-all,none,ok,,k9")  # a torn last line
        resumed = RowWriter(out, resume=True)  # a resumed run must not truncate it
        assert read_rows(out) == first
        new = Row(file="f3.json", strategy="store-all", budget="none", status=OK, key="k3", nodes=3)
        resumed.append([new])
        resumed.close()  # and is killed in turn: still nothing lost, no torn record read
        assert read_rows(out) == [*first, new]
        resumed = RowWriter(out, resume=True)
        resumed.finish([*first, new])
        assert read_rows(out) == [*first, new]
        assert len(out.read_text().splitlines()) == 4 + (suffix == ".csv")


def test_plans_are_written_whole(tmp_path: Path) -> None:
    root = tmp_path / "models"
    _write_graph(root / "a.json", seed=1)
    out_dir = tmp_path / "plans"
    res = CliRunner().invoke(cli, ["batch", str(root), "-j", "1", "-s", "store-all", "--out-dir", str(out_dir)])
    assert res.exit_code == 0, res.stderr
    written = sorted(p.name for p in out_dir.rglob("*") if p.is_file())
    assert written == ["a.json.store-all.plan.json"]  # no temporary file left behind
    graph = load_graph(root / "a.json")
    schedule, _ = read_plan(out_dir / written[0], graph)
    assert simulate(graph, schedule).error is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_resume_from_a_fifo_is_refused_not_blocking(tmp_path: Path) -> None:
    from remat_cli.errors import InputError

    fifo = tmp_path / "out.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="named pipe"):
        read_rows(fifo)


def plan_or_hog(task: FileTask) -> FileResult:
    """A per-file function that tries to take 4 GiB on files named hog*."""
    if Path(task.path).name.startswith("hog"):
        hog = bytearray(4 << 30)
        return FileResult(task.path, (Row(file=task.path, strategy="x", budget="none", status=OK, nodes=len(hog)),))
    return plan_file(task)


def test_the_memory_guard_stops_a_hungry_file_and_the_rest_completes(tmp_path: Path) -> None:
    root = tmp_path / "models"
    for name in ("a.json", "hog.json", "z.json"):
        _write_graph(root / name, seed=len(name))
    tasks = make_tasks(discover([root]), strategies=["store-all"], budgets=[parse_budget("none")])
    result = run_batch(tasks, executor=LocalExecutor(1, memory_limit=1 << 30), work=plan_or_hog)
    assert [(Path(r.file).name, r.status) for r in result.rows] == [("a.json", OK), ("hog.json", "error"), ("z.json", OK)]
    assert "MemoryError" in result.rows[1].message
