"""The ``remat`` command line: thin click commands that parse, call the library, render.

Every failure the user can cause becomes one line on stderr and exit code 2 (bad input)
or 1 (no plan fits / a check failed); see DESIGN §5.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from remat_cli import __version__
from remat_cli.budget import Budget, parse_budget, parse_size
from remat_cli.errors import EXIT_BAD_INPUT, EXIT_FAILED, InputError, RematError
from remat_cli.limits import DEFAULT_LIMITS, Limits, default_memory_limit, lift_memory_limit, set_memory_limit
from remat_cli.units import Phrase, say, visible

if TYPE_CHECKING:
    from rich.console import Console

    from remat_cli.loaders import LoadOptions
    from remat_cli.report.plain import PlainConsole

# Commands import what they use inside their bodies: `remat --version` and `--help`
# must not pay for numpy, rich tables and every strategy (start-up time matters).
DEFAULT_STRATEGY = "auto"  # remat_cli.batch.DEFAULT_STRATEGY; a test keeps them equal

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class BudgetType(click.ParamType):
    """``12GiB``, ``800MB``, ``123456``, ``0.5x``, ``50%`` or ``none``."""

    name = "BUDGET"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Budget:
        if isinstance(value, Budget):
            return value
        try:
            return parse_budget(str(value))
        except InputError as exc:
            self.fail(exc.message, param, ctx)
        except (OverflowError, ValueError):  # e.g. 1e999GiB: a number no machine has
            self.fail(f"cannot read budget {str(value)[:40]!r}: the number is too large", param, ctx)


class OneLineUsageError(click.UsageError):
    """Bad usage (an unknown option, a bad value, a missing argument) as one line, exit 2."""

    def show(self, file: Any = None) -> None:
        text = " ".join(self.format_message().split())
        _line(f"remat: error: {text}")


def _one_line_usage(exc: click.UsageError, ctx: click.Context) -> click.UsageError:
    """click's usage error as one ``remat: error:`` line (not three lines of usage text)."""
    if isinstance(exc, (OneLineUsageError, OneLineParamError)):
        return exc
    return OneLineUsageError(exc.format_message(), ctx=exc.ctx or ctx)


class RematGroup(click.Group):
    """Turns :class:`RematError`, bad usage and I/O errors into one line on stderr and an exit code."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise _one_line_usage(exc, ctx) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RematError as exc:
            _line(f"remat: error: {exc.message}")
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            _line("remat: interrupted")
            ctx.exit(130)
        except click.UsageError as exc:
            raise _one_line_usage(exc, ctx) from None
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:
            if not _reader_gone():  # not the reader of our output: a bug, said below
                return self._internal_error(ctx)
            _quiet_after_broken_pipe()  # `remat … | head`: end quietly
            ctx.exit(EXIT_BROKEN_PIPE)
        except MemoryError:
            lift_memory_limit()  # room to say so
            click.echo(
                "remat: error: out of memory: the input needs more than this process may use "
                "(raise it with --max-memory, or try a smaller graph or budget)",
                err=True,
            )
            ctx.exit(EXIT_BAD_INPUT)
        except Exception:  # a bug: still one line, the traceback on request
            return self._internal_error(ctx)

    @staticmethod
    def _internal_error(ctx: click.Context) -> None:
        """Say the exception being handled in one line (an output file that cannot be
        written: exit 2; a bug: exit 1), or raise it with ``REMAT_DEBUG`` set."""
        exc = sys.exc_info()[1]
        assert exc is not None
        if os.environ.get("REMAT_DEBUG"):
            raise exc
        if isinstance(exc, OSError) and exc.filename:  # an output file that cannot be written
            _note(f"error: {exc.filename}: cannot write or read: {exc.strerror or exc}")
            ctx.exit(EXIT_BAD_INPUT)
        _note(f"internal error: {type(exc).__name__}: {exc} (please report it; REMAT_DEBUG=1 shows the traceback)")
        ctx.exit(EXIT_FAILED)


def _reader_gone() -> bool:
    """Whether the reader of standard output or error went away (`remat … | head`): a pipe
    or socket whose other end closed polls as an error or a hang-up. A broken pipe
    anywhere else (a worker's, say) is a bug, and said as one."""
    import select

    for stream in (sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
        except (OSError, ValueError, AttributeError):
            continue
        if not hasattr(select, "poll"):  # (Windows) a pipe or a socket may be it
            import stat

            try:
                mode = os.fstat(fd).st_mode
            except OSError:
                continue
            if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                return True
            continue
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        try:
            events = poll.poll(0)
        except OSError:
            continue
        if any(event & (select.POLLERR | select.POLLHUP) for _, event in events):
            return True
    return False


def _working(message: str) -> contextlib.AbstractContextManager[Any]:
    """A spinner on stderr while a step that may take seconds runs (terminals only)."""
    if not _stderr_may_be_terminal():  # piped: no spinner, and no rich console to import
        return contextlib.nullcontext()
    err = _stderr()
    return err.status(_as_text(message)) if err.is_terminal else contextlib.nullcontext()


def _as_text(message: str) -> str:
    """``message`` for a rich spinner or bar, which read markup: escaped, and its characters
    that print nothing written out (a model path ``x[/]y.py`` crashed the spinner)."""
    from rich.markup import escape

    return escape(visible(message))


@contextlib.contextmanager
def _progress_after(label: str, delay: float = 1.0) -> Iterator[Callable[[int, int, str], None] | None]:
    """A progress callback for the core; on a terminal a bar appears on stderr once the
    work has run ``delay`` seconds (a timer starts it, so slow steps are shown too)."""
    if not _stderr_may_be_terminal():  # piped: no bar, and no rich console to import
        yield None
        return
    err = _stderr()
    if not err.is_terminal:
        yield None
        return
    import threading

    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=err, transient=True)
    task = bar.add_task(_as_text(label), total=None)
    lock = threading.Lock()
    shown = [False]

    def show() -> None:
        with lock:
            bar.start()
            shown[0] = True

    def progress(done: int, total: int, text: str | Phrase) -> None:
        with lock:
            bar.update(task, completed=done, total=total or None, description=_as_text(str(say(text))[:60]))

    timer = threading.Timer(delay, show)
    timer.daemon = True
    timer.start()
    try:
        yield progress
    finally:
        timer.cancel()
        with lock:
            if shown[0]:
                bar.stop()


def _stderr_may_be_terminal() -> bool:
    """False where rich's stderr console surely is not a terminal (:func:`_may_be_terminal`)."""
    return _may_be_terminal(sys.stderr)


def _may_be_terminal(stream: Any) -> bool:
    """False where rich's console on ``stream`` surely is not a terminal (the stream is no
    tty and neither TTY_COMPATIBLE nor FORCE_COLOR says otherwise), known without importing rich."""
    if "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ:
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no stream, or a closed one: rich says False too
        return False


def _stderr() -> Console:
    """The invocation's one console for messages (stderr), made on first use."""
    return _console("stderr")


def _stdout() -> Console:
    """The invocation's one console for output (stdout), made on first use."""
    return _console("stdout")


def _table_stdout() -> Console | PlainConsole:
    """The console for a report of plain tables: rich's on a terminal; elsewhere one that
    draws simple tables without importing rich (rich still draws the rest)."""
    if sys.stdout is not None and not _may_be_terminal(sys.stdout):  # (rich drops output to None)
        from remat_cli.report.plain import PlainConsole, plain_width

        width = plain_width()
        if width is not None:
            return PlainConsole(width, _stdout)
    return _stdout()


def _console(stream: str) -> Console:
    """One rich console per stream per invocation, kept in the click context's ``meta``
    (shared by the group and its command); outside an invocation, a new one."""
    ctx = click.get_current_context(silent=True)
    consoles: dict[str, Console] = ctx.meta.setdefault("remat.consoles", {}) if ctx is not None else {}
    if stream not in consoles:
        from rich.console import Console

        # emoji=False: a name from a file (``x:smile:y``) is printed as it is
        consoles[stream] = Console(stderr=stream == "stderr", highlight=False, emoji=False)
    return consoles[stream]


class OneLineParamError(click.BadParameter):
    """A bad option value shown as one line (``remat: error: …``), exit 2, no usage text."""

    def show(self, file: Any = None) -> None:
        _line(f"remat: error: {self.message}")


class DimType(click.ParamType):
    """``NAME=VALUE``: set the symbolic dimension NAME (e.g. ``batch``) to a positive integer."""

    name = "NAME=VALUE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, int]:
        if isinstance(value, tuple):
            return value
        text = str(value)
        key, sep, raw = text.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not key:
            raise OneLineParamError(f"--dim {text!r}: expected NAME=VALUE, e.g. --dim batch=8", ctx=ctx, param=param)
        try:
            number = int(raw)
        except ValueError:
            raise OneLineParamError(f"--dim {text!r}: {raw!r} is not an integer (e.g. --dim {key}=8)", ctx=ctx, param=param) from None
        if number <= 0:
            raise OneLineParamError(f"--dim {text!r}: a dimension must be a positive integer", ctx=ctx, param=param)
        return key, number


class SizeType(click.ParamType):
    """A size in bytes: ``2GiB``, ``500MB``, ``123456`` (and ``none`` where ``allow_none``)."""

    name = "SIZE"

    def __init__(self, allow_none: bool = False) -> None:
        self.allow_none = allow_none

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | None:
        if value is None or isinstance(value, int):
            return value
        text = str(value).strip()
        if self.allow_none and text.lower() in ("none", "off", "0"):
            return 0  # no limit (None means: not given, use the default)
        try:
            size = parse_size(text)
        except OverflowError:
            raise OneLineParamError(f"{_opt(param)} {text!r}: too large", ctx=ctx, param=param) from None
        except InputError as exc:
            raise OneLineParamError(f"{_opt(param)} {text!r}: {exc.message}", ctx=ctx, param=param) from None
        if size <= 0:
            raise OneLineParamError(f"{_opt(param)} {text!r}: give a positive size, e.g. 4GiB", ctx=ctx, param=param)
        return size


def _opt(param: click.Parameter | None) -> str:
    return param.opts[0] if param is not None and getattr(param, "opts", None) else "option"


_D = DEFAULT_LIMITS
LIMIT_OPTIONS = [
    click.option(
        "--max-file-size",
        type=SizeType(),
        default=None,
        help=f"Refuse graph and plan files larger than this [default: {_D.max_file_bytes >> 30}GiB].",
    ),
    click.option(
        "--max-dim", type=click.IntRange(min=1), default=None, help=f"Refuse --dim values larger than this [default: 2^40 = {_D.max_dim}]."
    ),
    click.option(
        "--max-total-size",
        type=SizeType(),
        default=None,
        help="Refuse graphs whose sizes (outputs, workspaces, fixed memory) sum above this [default: 1EiB].",
    ),
    click.option(
        "--max-memory",
        type=SizeType(allow_none=True),
        default=None,
        help="Memory this process (and each batch worker) may use; beyond it remat stops with one line [default: 80% of RAM; none: no limit].",
    ),
]
_MAX_NODES_OPTION = click.option(
    "--max-nodes",
    type=click.IntRange(min=1),
    default=None,
    help=f"Refuse graphs with more nodes than this [default: {_D.max_nodes}]; batch and check report them as too-large rows.",
)


_GRAPH_OPTIONS = [
    click.option(
        "--dim", "dims", type=DimType(), multiple=True, help="Set a symbolic dimension of an ONNX model, e.g. --dim batch=32 (repeatable)."
    ),
    click.option(
        "--training/--inference",
        "training",
        default=None,
        help="Schedule the training graph (ONNX default) or the forward pass alone. JSON graphs are taken as given unless --training.",
    ),
    click.option(
        "--convention",
        type=click.Choice(["checkmate", "autograd"]),
        default=None,
        help="How to build the training graph [ONNX: autograd; JSON: checkmate].",
    ),
    click.option(
        "--optimizer",
        type=click.Choice(["sgd", "momentum", "adam"]),
        default="sgd",
        show_default=True,
        help="Optimizer state in fixed memory: 0, 1 or 2 copies of the parameters.",
    ),
    click.option(
        "--cost",
        "cost",
        type=click.Choice(["flops", "bytes", "unit", "roofline"]),
        default="roofline",
        show_default=True,
        help="What a node's cost means for ONNX models; roofline = seconds on --device.",
    ),
    click.option(
        "--device",
        default="a100",
        show_default=True,
        metavar="NAME|FILE.json",
        help="Device for roofline time: cpu, a100, h100, or a JSON profile.",
    ),
    click.option(
        "--keep-views", is_flag=True, default=False, help="Keep zero-copy view ops (Reshape, Squeeze, …) as nodes instead of folding them."
    ),
    click.option(
        "--precision",
        type=click.Choice(["fp32", "bf16", "fp16", "amp"]),
        default="fp32",
        show_default=True,
        help="Training precision of an ONNX model: sizes, fixed memory and roofline peaks per dtype (docs/precision.md).",
    ),
    click.option(
        "--world-size",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        help="Data-parallel devices; --dim batch stays the per-device batch (docs/sharding.md).",
    ),
    click.option(
        "--shard",
        type=click.Choice(["none", "optimizer", "gradients", "parameters"]),
        default="none",
        show_default=True,
        help="ZeRO stage 1/2/3 (FSDP): which fixed memory is divided over --world-size devices.",
    ),
    click.option(
        "--profile",
        "profile",
        default=None,
        metavar="FILE",
        help="Measured per-op seconds (torch.profiler Chrome trace JSON or node,seconds CSV) used instead of the roofline where they match.",
    ),
    click.option(
        "--attention",
        type=click.Choice(["fused", "unfused"]),
        default="fused",
        show_default=True,
        help="ONNX attention (MatMul, scale, mask, Softmax, MatMul): fused = one kernel keeping output and logsumexp, "
        "as PyTorch ≥2.0 runs scaled_dot_product_attention, which exports as that pattern; unfused = as exported, "
        "keeping the [batch, heads, seq, seq] probabilities (a model that writes its own softmax).",
    ),
]


def graph_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Options shared by every command that reads a graph (limits included)."""
    for option in reversed(_GRAPH_OPTIONS + LIMIT_OPTIONS):
        func = option(func)
    return func


def node_limit_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--max-nodes`` for single-graph commands (batch and check have it among executor options)."""
    return _MAX_NODES_OPTION(func)


class Seconds(click.FloatRange):
    """A number of seconds within a range: ``nan`` is refused (it passes every comparison
    of a range check, and a deadline of NaN never passes); ``inf`` means no limit."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if seconds != seconds:
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return seconds


def time_limit_option(default: float | None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--time-limit``, the same on every command that plans (plan, tradeoff, batch, check):
    seconds per plan, passed through the planner as ``RunContext.time_limit``."""
    return click.option(
        "--time-limit",
        type=Seconds(min=0.1),
        default=default,
        show_default=default is not None,
        metavar="SECONDS",
        help="Time limit in seconds per plan: the exact solver's (60 unless given), and auto/treewidth/pathwidth "
        "return the best plan found by then" + ("." if default is not None else " (default: none)."),
    )


def _time_limit(time_limit: float | None) -> dict[str, float] | None:
    """batch's and check's plan options: only a given --time-limit (results made without one
    keep their resume fingerprint)."""
    return None if time_limit is None else {"time_limit": time_limit}


def _loader_nodes(max_nodes: int | None) -> int:
    """batch/check apply a smaller --max-nodes themselves (a too-large row with the graph's facts)."""
    return max(max_nodes or 0, _D.max_nodes)


def _limits(**kwargs: Any) -> Limits:
    """The limit options as :class:`Limits` (defaults where not given)."""
    limits = Limits(
        max_file_bytes=kwargs.get("max_file_size") or _D.max_file_bytes,
        max_nodes=kwargs.get("max_nodes") or _D.max_nodes,
        max_dim=kwargs.get("max_dim") or _D.max_dim,
        max_total_bytes=kwargs.get("max_total_size") or _D.max_total_bytes,
    )
    return limits


def _memory_guard(kwargs: dict[str, Any]) -> int | None:
    """Apply --max-memory to this process (default 80% of RAM); the value for batch workers."""
    given = kwargs.get("max_memory")
    limit = default_memory_limit() if given is None else (given or None)
    set_memory_limit(limit)
    return limit


def _load_options(**kwargs: Any) -> LoadOptions:
    """The shared graph options as :class:`LoadOptions`; loader warnings go to stderr."""
    _memory_guard(kwargs)
    dims = tuple(kwargs.get("dims") or ())
    names = [k for k, _ in dims]
    dup = next((k for k in names if names.count(k) > 1), None)
    if dup is not None:
        raise InputError(f"--dim {dup} is given more than once")
    from remat_cli.loaders import LoadOptions

    return LoadOptions(
        dims=dims,
        training=kwargs.get("training"),
        convention=kwargs.get("convention"),
        optimizer=kwargs.get("optimizer") or "sgd",
        cost=kwargs.get("cost") or "roofline",
        device=kwargs.get("device") or "a100",
        keep_views=bool(kwargs.get("keep_views")),
        precision=kwargs.get("precision") or "fp32",
        world_size=int(kwargs.get("world_size") or 1),
        shard=kwargs.get("shard") or "none",
        profile=kwargs.get("profile"),
        attention=kwargs.get("attention") or "fused",
        limits=_limits(**kwargs),
    )


# command-line parameter -> the LoadOptions field it sets
_LOAD_FIELDS = {
    "dims": "dims",
    "training": "training",
    "convention": "convention",
    "optimizer": "optimizer",
    "cost": "cost",
    "device": "device",
    "keep_views": "keep_views",
    "precision": "precision",
    "world_size": "world_size",
    "shard": "shard",
    "profile": "profile",
    "attention": "attention",
}


def _given_load_fields(ctx: click.Context) -> frozenset[str]:
    """The graph options the user set (command line or environment), even to their default."""
    from click.core import ParameterSource

    given = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    return frozenset(f for p, f in _LOAD_FIELDS.items() if ctx.get_parameter_source(p) in given)


def _warn(message: str) -> None:
    _line(f"remat: warning: {message}")


def _note(message: str) -> None:
    _line(f"remat: {message}")


def _line(text: str, err: bool = True) -> None:
    """``text`` as one line as it is (:func:`~remat_cli.units.visible`, line breaks written
    out too), on stderr unless ``err`` is false.
    Not through rich: it would read an emoji code in a name (a file's ``x:smile:y.json``, a
    node's) as an emoji, and an error exit need not import it (~17 ms)."""
    click.echo(visible(text, breaks=False), err=err)


#: ``--format`` choices, one list per kind of output: a report (one graph, plan or
#: result), and rows (one per budget, strategy or file), which CSV also carries.
REPORT_FORMATS = ("table", "json")
ROW_FORMATS = ("table", "csv", "json")


def format_option(
    choices: tuple[str, ...] = REPORT_FORMATS, default: str = "table", help: str = "table for people, json for machines."
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--format`` with one of the shared choice lists (a command's own choice says why in ``help``)."""
    return click.option("--format", "fmt", type=click.Choice(list(choices)), default=default, show_default=True, help=help)


FORMAT_OPTION = format_option()


@click.group(cls=RematGroup, context_settings=CONTEXT)
@click.version_option(__version__, "-V", "--version", prog_name="remat")
def cli() -> None:
    """Make neural-network training fit in memory by recomputing instead of storing.

    remat reads a computation graph (ONNX, remat JSON, node-link JSON or twremat text),
    plans which values to keep and which to recompute under a memory budget, checks every
    plan with one simulator, and reports peak memory against extra compute.

    \b
    Examples:
      remat info sample_graphs/unet.onnx --dim batch=8
      remat plan sample_graphs/unet.onnx --dim batch=8 --budget 0.5x
      remat plan model.onnx --budget 12GiB --strategy treewidth -o plan.json
      remat tradeoff sample_graphs/unet_train.json --plot tradeoff.png
      remat validate model.onnx plan.json

    Budgets are sizes (12GiB, 800MB, 123456 bytes), ratios of the store-all peak
    (0.5x, 50%; fixed memory included), or fractions of the activation memory (0.5act;
    fixed memory left out: 0act = the lower bound, 1act = the store-all peak).
    Exit codes: 0 ok, 1 no plan fits or a check failed (or the output's reader went away:
    `remat … | head`), 2 bad input.
    """


@cli.command(context_settings=CONTEXT)
@click.argument("graph_file", metavar="GRAPH")
@click.option(
    "--decompose/--no-decompose",
    default=True,
    show_default=True,
    help="Also find treewidth and pathwidth upper bounds (moral skeleton) and time them.",
)
@graph_options
@node_limit_option
@FORMAT_OPTION
def info(graph_file: str, fmt: str, decompose: bool, **graph_kw: Any) -> None:
    """Describe a graph: size, lower bound, store-all peak, where the memory is."""
    from remat_cli.loaders import build_graph, other_variant, read_file
    from remat_cli.report.tables import render_info, summary_to_json
    from remat_cli.summary import summarize

    options = _load_options(**graph_kw)
    loaded = read_file(graph_file, options, warn=_warn)
    graph = build_graph(loaded, options, warn=_warn, note=_note).graph
    with _progress_after(f"describing {graph.n:,} nodes" + (" (decompositions)" if decompose else "")):
        summary = summarize(graph, decompose=decompose, companion=other_variant(loaded, options))
    if fmt == "json":
        click.echo(json.dumps(summary_to_json(summary), indent=1, allow_nan=False))
    else:
        render_info(summary, _table_stdout())


@cli.command(context_settings=CONTEXT)
@click.argument("graph_file", metavar="GRAPH")
@click.option(
    "-s",
    "--strategy",
    default="auto",
    show_default=True,
    metavar="NAME",
    help="Strategy to plan with; see `remat strategies`. auto runs every fast one and keeps the cheapest plan that fits.",
)
@click.option(
    "-b",
    "--budget",
    type=BudgetType(),
    default="none",
    show_default=True,
    help="Memory budget, fixed memory included: 12GiB, 800MB, 123456, 0.5x or 50% (of the store-all peak), 0.5act (of the activation memory: 0act = the lower bound, 1act = the store-all peak) or none.",
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), help="Write the plan: remat-plan JSON, or twremat c/f text if it ends in .txt."
)
@click.option(
    "--timeline", type=click.Path(dir_okay=False), metavar="OUT.png|svg", help="Plot memory over the schedule (needs remat-cli[plot])."
)
@click.option(
    "--trace",
    type=click.Path(dir_okay=False),
    metavar="OUT.json",
    help="Write a Chrome trace (Perfetto, chrome://tracing): memory counter + one slice per compute.",
)
@click.option(
    "--dot",
    type=click.Path(dir_okay=False),
    metavar="OUT.dot",
    help="Write the graph as Graphviz DOT, kept / recomputed / target nodes styled.",
)
@time_limit_option(60.0)
@click.option(
    "-v", "--verbose", is_flag=True, help="Also the strategy's internals (decomposition bounds, solver details) and full node names."
)
@graph_options
@node_limit_option
@FORMAT_OPTION
def plan(
    graph_file: str,
    verbose: bool,
    strategy: str,
    budget: Budget,
    output: str | None,
    timeline: str | None,
    trace: str | None,
    dot: str | None,
    fmt: str,
    time_limit: float,
    **graph_kw: Any,
) -> None:
    """Plan a schedule for GRAPH under a memory budget and report what it costs.

    The plan is replayed by the simulator before anything is printed; a plan that does
    not fit the budget is never reported as fitting (exit 1, naming the lower bound and
    the smallest budget a search found the strategy to meet, in bytes, x and act). The
    report splits the peak into fixed memory and activations, and names the values
    recomputed most.

    \b
    Examples:
      remat plan g.json --budget 0.5x --timeline mem.png
      remat plan g.json --budget 0.3act      # 30% of the way from the lower bound to store-all
      remat plan g.json --budget 8GiB --trace plan.trace.json --dot plan.dot
    """
    from remat_cli.loaders import load_graph
    from remat_cli.plandoc import load_record, write_plan
    from remat_cli.planner import make_plan
    from remat_cli.report.facts import facts_ahead, plan_facts
    from remat_cli.report.tables import plan_report_json, render_plan
    from remat_cli.strategies import RunContext

    if timeline:
        from remat_cli.report.plots import check_plot_path, require_matplotlib

        check_plot_path(timeline, "--timeline")
        require_matplotlib("--timeline")
    options = _load_options(**graph_kw)
    graph = load_graph(graph_file, options, warn=_warn, note=_note)
    with _progress_after(f"planning {graph.n:,} nodes with {strategy}") as progress:
        context = RunContext(time_limit=time_limit, progress=progress, idle=facts_ahead(graph))
        result = make_plan(graph, strategy, budget, context=context, find_smallest=True, graph_file=graph_file)
    facts = plan_facts(result)
    written: list[str] = []
    if output:
        write_plan(result, output, load_record(options, graph))
        written.append(f"plan written to {output}")
    if timeline:
        from remat_cli.report.plots import plot_timeline

        plot_timeline(result, timeline, facts)
        written.append(f"timeline written to {timeline}")
    if trace:
        from remat_cli.report.trace import write_trace

        write_trace(result, trace, facts)
        written.append(f"trace written to {trace} (open in https://ui.perfetto.dev)")
    if dot:
        from remat_cli.report.dot import write_dot

        write_dot(result, dot, facts)
        written.append(f"graph written to {dot} (render: dot -Tsvg {dot})")
    attention = None
    if isinstance(graph.meta.get("attention"), dict):  # else from_meta says None: no import
        from remat_cli.attention import AttentionFacts

        attention = AttentionFacts.from_meta(graph.meta["attention"])
    if fmt == "json":
        report = plan_report_json(result, facts)
        if attention is not None:
            report["attention"] = asdict(attention)
        click.echo(json.dumps(report, indent=1, allow_nan=False))
        for line in written:
            _line(line)
    else:
        console = _table_stdout()
        render_plan(result, console, facts, verbose=verbose)
        if attention is not None and (attention.blocks or attention.native_ops):
            console.print(f"attention: {say(attention.phrase())}", markup=False, highlight=False)
        for line in written:
            _line(line, err=False)


@cli.command(context_settings=CONTEXT)
@click.argument("graph_file", metavar="GRAPH", type=click.Path(dir_okay=False))
@click.option(
    "-S",
    "--strategies",
    "strategy_list",
    metavar="A,B,…",
    default=None,
    help="Strategies to compare (default: every fast one; 'all' adds the slow ones).",
)
@click.option(
    "-n",
    "--points",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Number of budgets, evenly spaced from the lower bound to the store-all peak.",
)
@click.option("--budgets", "budget_list", metavar="B1,B2,…", default=None, help="Explicit budgets instead of --points: 0.9x,0.7x,8GiB,…")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False),
    metavar="OUT.png|svg",
    help="Plot overhead (and est. step time) against peak memory (needs remat-cli[plot]).",
)
@time_limit_option(None)
@graph_options
@node_limit_option
@format_option(ROW_FORMATS, help="table for people; csv or json for machines.")
def tradeoff(
    graph_file: str,
    strategy_list: str | None,
    points: int,
    budget_list: str | None,
    plot: str | None,
    fmt: str,
    time_limit: float | None,
    **graph_kw: Any,
) -> None:
    """Sweep budgets from the lower bound to the store-all peak and compare strategies.

    For every budget and strategy: the extra compute (overhead), estimated step time when
    the graph has a time model, or "no fit". Marks the Pareto frontier across strategies
    (no other plan is both smaller and cheaper) and the smallest budget each was found
    to meet: a bisection to 0.1% of the store-all peak (the figure `plan` and `check`
    name too), assuming a strategy that fits a budget fits every larger one; where a
    strategy is known not to (greedy, dtr, auto), it says so. Every plan is checked by
    the simulator.

    \b
    Examples:
      remat tradeoff g.json --points 10 --plot tradeoff.png
      remat tradeoff g.json --strategies store-all,treewidth --budgets 0.9x,0.7x,8GiB
      remat tradeoff g.json --format csv > sweep.csv
    """
    from remat_cli.loaders import load_graph
    from remat_cli.budget import parse_budget_list
    from remat_cli.report.tradeoff import tradeoff_to_csv, tradeoff_to_json
    from remat_cli.strategies import RunContext
    from remat_cli.sweep import resolve_strategies, sweep

    if plot:
        from remat_cli.report.plots import check_plot_path, require_matplotlib

        check_plot_path(plot, "--plot")
        require_matplotlib("--plot")
    chosen = resolve_strategies(strategy_list)
    budgets = parse_budget_list(budget_list) if budget_list is not None else None
    graph = load_graph(graph_file, _load_options(**graph_kw), warn=_warn, note=_note)
    context = RunContext(time_limit=time_limit)
    result = _with_progress(lambda progress: sweep(graph, chosen, budgets, points=points, context=context, progress=progress))
    if fmt == "json":
        click.echo(json.dumps(tradeoff_to_json(result), indent=1))
    elif fmt == "csv":
        click.echo(tradeoff_to_csv(result), nl=False)
    else:
        from remat_cli.report.tables import render_tradeoff

        render_tradeoff(result, _stdout())
    from remat_cli.units import fmt_bytes

    for p in result.points:
        if p.status == "error":
            _line(f"remat: warning: {p.strategy} at {fmt_bytes(p.budget_bytes)} failed: {p.message}")
    if plot:
        from remat_cli.report.plots import plot_tradeoff

        plot_tradeoff(result, plot)
        _line(f"plot written to {plot}", err=fmt != "table")


def _with_progress(work: Callable[[Callable[[int, int, str], None] | None], Any]) -> Any:
    """Run ``work(progress)`` with a rich progress bar on stderr when it is a terminal."""
    if not _stderr_may_be_terminal():  # piped: no bar, and no rich console to import
        return work(None)
    err = _stderr()
    if not err.is_terminal:
        return work(None)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task("planning", total=None)

        def progress(done: int, total: int, label: str | Phrase) -> None:
            bar.update(task, completed=done, total=total, description=_as_text(str(say(label))[:30]))

        return work(progress)


@cli.command(context_settings=CONTEXT)
@click.argument("graph_file", metavar="GRAPH")
@click.argument("plan_file", metavar="PLAN")
@click.option("-b", "--budget", type=BudgetType(), default="none", help="Also fail (exit 1) if the plan peaks above this budget.")
@graph_options
@node_limit_option
@FORMAT_OPTION
def validate(graph_file: str, plan_file: str, budget: Budget, fmt: str, **graph_kw: Any) -> None:
    """Replay PLAN (remat-plan JSON or twremat c/f text) on GRAPH and print its metrics.

    Every claim a plan JSON makes (node count, budget_bytes, budget_ratio, the numbers in
    metrics) is checked against the replay; the fields it does not check are listed.
    Exit 1 with the first invalid step or false claim, or if the plan peaks above
    --budget; exit 2 if a claim has the wrong type.
    """
    from remat_cli.loaders import load_graph
    from remat_cli.plandoc import load_record, read_plan
    from remat_cli.planner import resolve_budget
    from remat_cli.units import fmt_bytes_pair
    from remat_cli.report.tables import render_metrics
    from remat_cli.simulate import simulate

    from rich.text import Text

    from remat_cli.plandoc import validate_claims

    options = _load_options(**graph_kw)
    graph = load_graph(graph_file, options, warn=_warn, note=_note)
    schedule, header = read_plan(plan_file, graph, load_record(options, graph), _limits(**graph_kw).max_file_bytes)
    result = simulate(graph, schedule)
    if result.error is not None:
        if fmt == "json":
            click.echo(json.dumps({"valid": False, "step": result.error.step, "node": result.error.node, "reason": result.error.reason}))
        raise RematError(f"{plan_file}: invalid at {result.error}", EXIT_FAILED)
    m = result.metrics
    assert m is not None
    claims = validate_claims(header, graph, m, plan_file) if header else None
    budget_bytes = resolve_budget(graph, budget)
    over = budget_bytes is not None and m.peak_bytes > budget_bytes
    if fmt == "json":
        from remat_cli.plandoc import metrics_to_json

        doc = metrics_to_json(m)
        doc["budget_bytes"] = budget_bytes
        doc["fits"] = not over
        if claims is not None:
            doc["claims_checked"] = list(claims.checked)
            doc["claims_ignored"] = list(claims.ignored)
            doc["claims_hold"] = claims.wrong is None
        click.echo(json.dumps(doc, indent=1, allow_nan=False))
    elif claims is None or claims.wrong is None:  # a false claim is the one line below
        console = _stdout()
        table = render_metrics(m, console, graph.cost_unit, f"{plan_file}: valid")
        if claims is not None:
            table.add_row("claims checked", Text(", ".join(claims.checked) or "none"))
            table.add_row("not checked", Text(", ".join(claims.ignored) or "none"))
        console.print(table)
    if claims is not None and claims.wrong is not None:
        name, stated, actual = claims.wrong
        if name == "budget_bytes":
            raise RematError(f"{plan_file}: states budget_bytes {stated} but its schedule peaks at {actual} B", EXIT_FAILED)
        raise RematError(f"{plan_file}: states {name} {stated!r} but the replay gives {actual!r}", EXIT_FAILED)
    if over:
        peak, limit = fmt_bytes_pair(m.peak_bytes, budget_bytes)
        raise RematError(f"{plan_file}: peak {peak} is above the budget {limit}", EXIT_FAILED)


@cli.command(context_settings=CONTEXT)
@click.argument("input_file", metavar="IN")
@click.argument("output_file", metavar="OUT", type=click.Path(dir_okay=False))
@click.option(
    "--to",
    "to",
    type=click.Choice(["remat-json", "twremat"]),
    default=None,
    help="Output format (default: twremat for .txt, else remat JSON).",
)
@graph_options
@node_limit_option
def convert(input_file: str, output_file: str, to: str | None, **graph_kw: Any) -> None:
    """Convert any graph file remat reads into remat JSON (or twremat text)."""
    from remat_cli.loaders import load_graph, remat_json, twremat

    graph = load_graph(input_file, _load_options(**graph_kw), warn=_warn, note=_note)
    if to is None:
        to = "twremat" if Path(output_file).suffix == ".txt" else "remat-json"
    text = twremat.dumps(graph) if to == "twremat" else remat_json.dumps(graph)
    try:
        Path(output_file).write_text(text)
    except OSError as exc:
        raise InputError(f"{output_file}: cannot write: {exc.strerror or exc}") from None
    _line(f"wrote {output_file} ({to}, {graph.n} nodes, {graph.num_edges} edges)")


@cli.command(context_settings=CONTEXT)
@FORMAT_OPTION
def strategies(fmt: str) -> None:
    """List the planning strategies and what each does."""
    from remat_cli.strategies import STRATEGIES

    rows = [
        {"name": s.name, "uses_budget": s.uses_budget, "fast": s.fast, "summary": s.summary, "reference": s.reference}
        for s in STRATEGIES.values()
    ]
    if fmt == "json":
        click.echo(json.dumps(rows, indent=1))
        return
    from remat_cli.report.tables import kv_table

    console = _stdout()
    table = kv_table(console, "strategies")
    for row in rows:
        notes = [] if row["uses_budget"] else ["ignores --budget"]
        if not row["fast"] and row["name"] != "auto":  # auto runs the others; it is not slow itself
            notes.append("slow: not run by auto")
        text = row["summary"] + (f" [{'; '.join(notes)}]" if notes else "")
        table.add_row(row["name"], text)
    console.print(table)


# --------------------------------------------------------------------------- many models


EXECUTOR_OPTIONS = [
    click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Worker processes (default: one per core)."),
    click.option(
        "--executor",
        type=click.Choice(["local", "dask"]),
        default="local",
        show_default=True,
        help="Where to run: local worker processes, or a Dask distributed cluster (pip install 'remat-cli[dask]').",
    ),
    click.option("--scheduler", metavar="ADDRESS", help="Dask scheduler address for --executor dask, e.g. tcp://10.0.0.5:8786."),
    click.option(
        "--timeout",
        type=Seconds(min=0, min_open=True),
        default=None,
        metavar="SECONDS",
        help="Stop a file's worker after this long and report it (default: no limit).",
    ),
    click.option("--max-nodes", type=click.IntRange(min=1), default=None, help="Skip (and report) graphs with more nodes than this."),
]


def executor_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Options shared by `batch` and `check`: parallelism, executor, limits per file."""
    for option in reversed(EXECUTOR_OPTIONS):
        func = option(func)
    return func


@cli.command(context_settings=CONTEXT)
@click.argument("paths", metavar="PATH...", nargs=-1, required=True, type=click.Path())
@click.option(
    "-s",
    "--strategy",
    "strategies",
    multiple=True,
    metavar="NAME",
    help=f"Strategy to plan with (repeat for several; default: {DEFAULT_STRATEGY}).",
)
@click.option(
    "-b",
    "--budget",
    type=BudgetType(),
    default="none",
    show_default=True,
    help="Memory budget for every file: 12GiB, 800MB, 0.5x, 50% or none.",
)
@click.option(
    "--budgets", "budget_list", metavar="LIST", help="A budget sweep instead of --budget: comma-separated, e.g. 1x,0.8x,0.6x,0.5x."
)
@click.option(
    "--glob",
    "globs",
    multiple=True,
    metavar="PATTERN",
    help="Only files whose path below PATH (or name) matches, e.g. '*.onnx' (repeatable).",
)
@time_limit_option(None)
@executor_options
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Write one CSV row per file, strategy and budget.")
@click.option(
    "--jsonl", "jsonl_path", type=click.Path(dir_okay=False), help="Write one JSON record per line per file, strategy and budget."
)
@click.option("--out-dir", type=click.Path(file_okay=False), help="Write each plan there (remat-plan JSON, mirroring the input tree).")
@click.option("--resume", is_flag=True, help="Reuse results already in --jsonl/--csv for files (and options) that have not changed.")
@click.option(
    "--fail-fast/--keep-going", default=False, show_default=True, help="Stop at the first failing file, or plan every file whatever fails."
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="Take each model's dims from this remat.toml's [[models]] tables (--dim still wins).",
)
@graph_options
@format_option(ROW_FORMATS, help="Summary on stdout: table for people, csv or json for machines.")
@click.option("-v", "--verbose", is_flag=True, help="All columns (graph size, solve time) in the table.")
def batch(
    paths: tuple[str, ...],
    strategies: tuple[str, ...],
    budget: Budget,
    budget_list: str | None,
    globs: tuple[str, ...],
    jobs: int | None,
    executor: str,
    scheduler: str | None,
    timeout: float | None,
    max_nodes: int | None,
    csv_path: str | None,
    jsonl_path: str | None,
    out_dir: str | None,
    resume: bool,
    fail_fast: bool,
    config_file: str | None,
    fmt: str,
    verbose: bool,
    time_limit: float | None,
    **graph_kw: Any,
) -> None:
    """Plan every graph file under PATH... (directories are searched recursively).

    Files are recognised by content (ONNX, remat JSON, node-link JSON, twremat text) and
    planned in parallel, each in its own worker: a file that cannot be read, fails, hangs
    past --timeout or crashes its worker becomes a row with its error, and the rest go
    on. Rows come out in file order whatever the parallelism. Exit 1 if any file failed
    or any plan did not fit; 130 when interrupted (the results so far are kept).

    Each row names the dims its file was loaded with. A --dim applies to every file that
    has that dimension; a --dim no file has is an error (exit 2). Models that need other
    values take them from --config's [[models]] tables (path, dims), as `remat check`.

    \b
    Examples:
      remat batch models/ --budget 0.5x --csv results.csv
      remat batch models/ --dim batch=8 --config remat.toml
      remat batch models/ --glob '*.onnx' --budgets 1x,0.75x,0.5x --jsonl sweep.jsonl --resume
      remat batch models/ --executor dask --scheduler tcp://10.0.0.5:8786 --jsonl out.jsonl
    """
    from remat_cli import batch as batch_mod
    from remat_cli.budget import parse_budget_list
    from remat_cli.executors import make_executor
    from remat_cli.report.batch_view import BatchProgress, batch_summary, render_rows, rows_csv, rows_json

    request = batch_mod.BatchRequest(
        paths=paths,
        load=_load_options(max_nodes=_loader_nodes(max_nodes), **graph_kw),
        strategies=strategies or (batch_mod.DEFAULT_STRATEGY,),
        budgets=parse_budget_list(budget_list, allow_none=True) if budget_list else (budget,),
        globs=globs,
        max_nodes=max_nodes,
        dims_by_file=_config_dims(config_file),
        csv_path=csv_path,
        jsonl_path=jsonl_path,
        out_dir=out_dir,
        resume=resume,
        fail_fast=fail_fast,
        warn=_warn,
        note=_note,
        plan_options=_time_limit(time_limit),
    )
    run_on = make_executor(executor, scheduler, jobs, timeout, memory_limit=_memory_guard(graph_kw))
    job = batch_mod.prepare_batch(request)
    err = _stderr()
    with batch_mod.interrupt_flag() as stop, BatchProgress(err, len(job.tasks)) as progress:
        result = job.run(run_on, on_start=progress.start, on_done=progress.done, stop=stop)
    if fmt == "json":
        click.echo(rows_json(result.rows))
    elif fmt == "csv":
        click.echo(rows_csv(result.rows), nl=False)
    else:
        files = len(job.files)
        render_rows(result.rows, _stdout(), f"{files} file{'s' if files != 1 else ''}, {say(run_on.describe())}", verbose=verbose)
    err.print(batch_summary(result), highlight=False, markup=False)
    if result.interrupted:
        click.get_current_context().exit(130)
    job.check_dims(result)
    if result.failures:
        click.get_current_context().exit(EXIT_FAILED)


def _config_dims(config_file: str | None) -> dict[str, tuple[tuple[str, int], ...]]:
    """``batch --config``: each model's own dims from the file's ``[[models]]``, by path."""
    if not config_file:
        return {}
    from remat_cli import config as config_mod

    return {e.path: e.dims for e in config_mod.load_config(config_file).models}


@cli.command(context_settings=CONTEXT)
@click.argument("models", metavar="[MODEL]...", nargs=-1, type=click.Path())
@click.option("-b", "--budget", type=BudgetType(), default=None, help="Memory budget every model must fit (overrides the configuration).")
@click.option("--max-overhead", default=None, metavar="PCT", help="Also fail when the plan adds more compute than this: 30% or 0.3.")
@click.option(
    "-s", "--strategy", default=None, metavar="NAME", help=f"Strategy to plan with (default: the configuration's, else {DEFAULT_STRATEGY})."
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="Configuration file (default: the nearest remat.toml or pyproject.toml with [tool.remat]).",
)
@click.option("--junit", type=click.Path(dir_okay=False), help="Write a JUnit XML report (one test case per model) for CI dashboards.")
@time_limit_option(None)
@executor_options
@graph_options
@format_option(
    ("text", "json"),
    default="text",
    help="text: one line per model saying why it passes or fails (not a table: CI logs are read line by line); json for machines.",
)
def check(
    models: tuple[str, ...],
    budget: Budget | None,
    max_overhead: str | None,
    strategy: str | None,
    config_file: str | None,
    junit: str | None,
    jobs: int | None,
    executor: str,
    scheduler: str | None,
    timeout: float | None,
    max_nodes: int | None,
    fmt: str,
    time_limit: float | None,
    **graph_kw: Any,
) -> None:
    """Check that every MODEL has a plan within the budget (and overhead limit): for CI.

    With no MODEL, the models, dims, budgets and limits come from remat.toml (or
    [tool.remat] in pyproject.toml), found from the current directory up; models named
    on the command line take that file's defaults. Command-line options win over the
    file. Prints one line per model saying why it passes or fails.

    \b
    Exit codes: 0 every model passes, 1 some model fails, 2 bad input.
    Examples:
      remat check model.onnx --budget 24GiB --max-overhead 30%
      remat check --junit remat-report.xml        # models from remat.toml
    """
    from remat_cli import batch as batch_mod
    from remat_cli import check as check_mod
    from remat_cli import config as config_mod
    from remat_cli.executors import make_executor
    from remat_cli.report.batch_view import BatchProgress, check_to_json, render_check

    run = check_mod.resolve_check(
        models,
        config_file=config_file,
        cli_load=_load_options(max_nodes=_loader_nodes(max_nodes), **graph_kw),
        cli_given=_given_load_fields(click.get_current_context()),
        budget=budget,
        max_overhead=config_mod.parse_overhead(max_overhead) if max_overhead is not None else None,
        strategy=strategy,
        max_nodes=max_nodes,
        jobs=jobs,
        timeout=timeout,
        junit=junit,
    )
    run_on = make_executor(executor, scheduler, run.jobs, run.timeout, memory_limit=_memory_guard(graph_kw))
    with batch_mod.interrupt_flag() as stop, BatchProgress(_stderr(), len(run.specs), "checking") as progress:
        report = check_mod.run_check(
            run.specs,
            executor=run_on,
            on_start=progress.start,
            on_done=progress.done,
            stop=stop,
            warn=_warn,
            note=_note,
            plan_options=_time_limit(time_limit),
        )
    if run.junit:
        check_mod.write_junit(report, run.junit)
    if fmt == "json":
        click.echo(json.dumps(check_to_json(report), indent=1))
    else:
        render_check(report, _stdout())
    if report.interrupted:
        _line("remat: interrupted")
        click.get_current_context().exit(130)
    if report.exit_code:
        click.get_current_context().exit(report.exit_code)


# ---------------------------------------------------------------- PyTorch (remat-cli[torch])
@cli.command("capture", context_settings=CONTEXT)
@click.argument("factory", metavar="FILE.py:FACTORY")
@click.argument("output_file", metavar="OUT.json", type=click.Path(dir_okay=False))
@click.option("--device", default="cpu", show_default=True, help="Device to move the model and inputs to (cpu, cuda, cuda:1).")
def capture_cmd(factory: str, output_file: str, device: str) -> None:
    """Capture a PyTorch model's training step as a remat graph (needs remat-cli[torch]).

    This command RUNS FILE.py: that is its purpose. FACTORY() must return (model,
    inputs) or (model, inputs, loss_fn); without loss_fn the loss is the sum of the
    outputs. The graph is exported with torch.export to core ATen; node ids are its op
    names, sizes and FLOPs are measured on one step. OUT.json is an ordinary remat graph
    (every command reads it) that records what it was captured from. No other remat
    command executes anything from a file.

    \b
    Example:
      remat capture examples/mlp.py:make mlp.json && remat plan mlp.json -b 0.5x -o plan.json
    """
    from remat_cli.torch import require_torch

    require_torch("remat capture")
    from remat_cli.loaders import remat_json
    from remat_cli.torch._capture import capture_program
    from remat_cli.torch.fidelity import load_factory

    model, inputs, loss_fn = load_factory(factory, device)
    with _working(f"capturing {factory}"):
        graph, _ = capture_program(model, inputs, loss_fn, factory=factory)
    try:
        Path(output_file).write_text(remat_json.dumps(graph))
    except OSError as exc:
        raise InputError(f"{output_file}: cannot write: {exc.strerror}") from None
    from remat_cli.units import fmt_bytes

    _line(
        f"captured {graph.name}: {graph.n} nodes, fixed {fmt_bytes(graph.fixed_mem)}, lower bound {fmt_bytes(graph.lb)} -> {output_file}",
        err=False,
    )


@cli.command("fidelity", context_settings=CONTEXT)
@click.argument("factory", metavar="FILE.py:FACTORY")
@click.option(
    "-b",
    "--budget",
    type=BudgetType(),
    default="0.5x",
    show_default=True,
    help="Memory budget of the plans: 12GiB, 0.5x, … (raised to the lower bound if below it).",
)
@click.option(
    "-s",
    "--strategy",
    "strategy_list",
    multiple=True,
    metavar="NAME",
    help="Strategy to plan with (repeat; default: chain-dp, dtr, treewidth).",
)
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True, help="Timed steps per plan (seconds are their median).")
@click.option("--device", default="cpu", show_default=True, help="Device to run on (cpu, cuda, cuda:1).")
@click.option("--no-sac", is_flag=True, help="Skip measuring each plan's keep-set as a selective-checkpointing policy.")
@FORMAT_OPTION
def fidelity_cmd(factory: str, budget: Budget, strategy_list: tuple[str, ...], runs: int, device: str, no_sac: bool, fmt: str) -> None:
    """Run plans in PyTorch and print predicted against measured (needs remat-cli[torch]).

    RUNS FILE.py (see `remat capture`). Captures the model, plans store-all and each
    STRATEGY under BUDGET, runs every plan's schedule step by step, and prints its peak
    bytes, extra FLOPs and step time, predicted and measured, the executor's fallback
    recomputations, and whether the gradients equal plain eager training's.

    \b
    Example:
      remat fidelity examples/transformer.py:make -b 0.5x -s chain-dp -s dtr
    """
    from remat_cli.torch import require_torch

    require_torch("remat fidelity")
    from remat_cli.report.fidelity import fidelity_to_json, render_fidelity
    from remat_cli.strategies import STRATEGIES as known
    from remat_cli.torch.fidelity import fidelity, load_factory

    names = list(strategy_list) or ["chain-dp", "dtr", "treewidth"]
    for name in names:
        if name not in known:
            raise InputError(f"unknown strategy {name!r}; see `remat strategies`")
    model, inputs, loss_fn = load_factory(factory, device)
    with _working(f"measuring {factory}"):
        report = fidelity(model, inputs, loss_fn, budget, names, factory=factory, runs=runs, sac=not no_sac)
    if fmt == "json":
        click.echo(json.dumps(fidelity_to_json(report), indent=1))
    else:
        out = _stdout()
        if not out.is_terminal:
            out.width = 100  # its table is wider than rich's 80 columns for a pipe
        render_fidelity(report, out)


class FitDimType(DimType):
    """``NAME=VALUE`` or ``NAME=?`` (the dimension ``remat fit`` searches; value None)."""

    name = "NAME=VALUE|NAME=?"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, int | None]:
        text = str(value)
        key, sep, raw = text.partition("=")
        if sep and key.strip() and raw.strip() == "?":
            return key.strip(), None
        return super().convert(value, param, ctx)


def fit_graph_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The shared graph options, with ``--dim`` accepting ``NAME=?``."""
    for option in reversed(_GRAPH_OPTIONS[1:] + LIMIT_OPTIONS):
        func = option(func)
    return click.option(
        "--dim",
        "dims",
        type=FitDimType(),
        multiple=True,
        help="NAME=? names the dimension to search (exactly one); NAME=VALUE sets another (repeatable).",
    )(func)


@cli.command(context_settings=CONTEXT)
@click.argument("model", metavar="MODEL")
@click.option(
    "-b", "--budget", type=BudgetType(), required=True, help="Memory budget per device, fixed memory included: 80GiB, 24GB, 123456."
)
@click.option(
    "--max-overhead", default=None, metavar="PCT", help="Only plans adding at most this much compute count as fitting: 20% or 0.2."
)
@click.option(
    "-s",
    "--strategy",
    default="auto",
    show_default=True,
    metavar="NAME",
    help="Strategy to plan each probe with (store-all: no recomputation).",
)
@click.option("--max-value", type=click.IntRange(min=1), default=1 << 20, show_default=True, help="Largest value of the dimension to try.")
@click.option(
    "--min-value",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Value the doubling starts from (the answer is at least this, or none).",
)
@fit_graph_options
@node_limit_option
@FORMAT_OPTION
def fit(
    model: str, budget: Budget, max_overhead: str | None, strategy: str, max_value: int, min_value: int, fmt: str, **graph_kw: Any
) -> None:
    """Find the largest value of one dimension (--dim batch=?) whose training step fits.

    Doubles the value (1, 2, 4, …) until a plan no longer fits, then bisects; every probe
    is a real plan replayed by the simulator. Prints the value, its plan's peak, overhead
    and estimated step time, the same for store-all (the largest value that fits without
    recomputation), and the throughput gain per estimated second. Assumes memory grows
    with the dimension: the value found fits and the next one does not (both probed).
    Exit 1 when even --min-value (default 1) does not fit.

    MODEL may be FILE.py:FACTORY (needs remat-cli[torch]; this RUNS FILE.py): each probe
    calls FACTORY(batch=v) (every --dim NAME=VALUE is passed as a keyword too) and captures
    one real training step on the CPU, so probe memory and time grow with v: cap them with
    --max-value and --max-memory. A capture that fails is that probe not fitting.

    \b
    Examples:
      remat fit model.onnx --budget 80GiB --dim batch=?
      remat fit model.onnx --budget 24GiB --dim batch=8 --dim sequence=? --max-overhead 20%
      remat fit examples/mlp.py:make --budget 64MiB --dim batch=? --max-value 4096
    """
    from remat_cli import config as config_mod
    from remat_cli.fit import fit_dimension
    from remat_cli.loaders import load_graph
    from remat_cli.report.fit_view import fit_to_json, render_fit

    dims = list(graph_kw.pop("dims", ()) or ())
    searched = [k for k, v in dims if v is None]
    if len(searched) != 1:
        raise InputError("remat fit: name exactly one dimension to search with --dim NAME=?, e.g. --dim batch=?")
    dim = searched[0]
    if budget.bytes is None:
        raise InputError(f"--budget {budget.text!r}: remat fit needs an absolute budget (80GiB, 24GB, …): relative ones change with {dim}")
    overhead = config_mod.parse_overhead(max_overhead) if max_overhead is not None else None
    fixed = tuple((k, v) for k, v in dims if v is not None)
    if ":" in model and model.rpartition(":")[0].endswith(".py"):
        load = _fit_factory_loader(model, dim, fixed, graph_kw)
    else:
        base = _load_options(dims=fixed, **graph_kw)

        def load(v: int) -> Any:
            graph = load_graph(model, replace(base, dims=fixed + ((dim, v),)), warn=_warn, note=_note)
            if dim not in (graph.meta.get("dims") or {}):
                raise InputError(f"{model}: the model has no dimension {dim!r} to search (remat fit needs an ONNX model with it)")
            return graph

    with _working(f"fitting {dim} of {model}") as status:

        def progress(msg: Phrase) -> None:
            if status is not None and hasattr(status, "update"):
                status.update(_as_text(f"fitting {dim} of {model}: {say(msg)}"))

        result = fit_dimension(
            load, dim, budget.bytes, strategy=strategy, max_overhead=overhead, max_value=max_value, min_value=min_value, progress=progress
        )
    if fmt == "json":
        click.echo(json.dumps(fit_to_json(result), indent=1))
    else:
        render_fit(result, _stdout(), Path(model).name)
    if result.best is None:
        click.get_current_context().exit(EXIT_FAILED)


#: graph options that describe how an ONNX model is turned into a training graph; a
#: captured PyTorch step is planned as it ran, so remat fit refuses them for factories
_ONNX_ONLY = (
    "training",
    "convention",
    "optimizer",
    "cost",
    "device",
    "keep_views",
    "precision",
    "world_size",
    "shard",
    "profile",
    "attention",
    "max_file_size",
    "max_total_size",
    "max_dim",
)


def _fit_factory_loader(spec: str, dim: str, fixed: tuple[tuple[str, int], ...], graph_kw: dict[str, Any]) -> Any:
    """``load(v)`` capturing ``FACTORY(dim=v, **fixed)`` on the CPU, under --max-memory."""
    from click.core import ParameterSource

    from remat_cli.fit import factory_loader

    ctx = click.get_current_context()
    given = [n for n in _ONNX_ONLY if ctx.get_parameter_source(n) is ParameterSource.COMMANDLINE]
    if given:
        opt = "--" + given[0].replace("_", "-")
        raise InputError(f"{spec}: {opt} applies to ONNX models; a captured PyTorch step is planned as it ran")
    names = [k for k, _ in fixed]
    dup = next((k for k in names + [dim] if (names + [dim]).count(k) > 1), None)
    if dup is not None:
        raise InputError(f"--dim {dup} is given more than once")
    _memory_guard(graph_kw)
    return factory_loader(spec, dim, dict(fixed), max_nodes=graph_kw.get("max_nodes"))


def main() -> None:
    """Console entry point."""
    if sys.argv[1:] in (["--version"], ["-V"]):  # the fast path: no click, no imports
        print(f"remat, version {__version__}")
        return
    cli.main(prog_name="remat")  # (a broken pipe: RematGroup.invoke, or click's own handler)


#: The exit status after the reader of the output went away: 1, as rich (which prints most
#: of it: ``Console.on_broken_pipe``), click (help) and Python's own advice end then; not
#: 0, which would pass a `remat check` gate whose verdict nobody read.
EXIT_BROKEN_PIPE = EXIT_FAILED


def _quiet_after_broken_pipe() -> None:
    """Point standard output and error at /dev/null: what they still buffer is flushed
    at exit, which would raise the broken pipe again and print it."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError, AttributeError):
            pass


if __name__ == "__main__":  # pragma: no cover
    main()
