"""Run one function over many inputs in isolated workers, surviving hangs and crashes.

``remat batch`` and ``remat check`` plan each file in a worker process so that a file
which hangs past its timeout is killed, and a file which crashes its worker (a segfault in
a native parser, an abort, running out of memory) becomes an error row instead of
taking the whole run down. Two executors share one interface:

* :class:`LocalExecutor`: ``jobs`` long-lived worker processes managed here (not a
  ``concurrent.futures`` pool: that one cannot kill a running task on timeout and breaks
  entirely when a worker dies). A worker that times out or dies is replaced. Where there are at
  least twice as many jobs as items (``remat check model.onnx`` on 2 cores), a plan in a
  worker may use a second process as ``remat plan`` does (:func:`_worker_loop`)
  (``check`` of grid1000 at 0.5x: 1.11 → 0.82 s; of random1000 at 0.3x, a failure and
  its search: 3.28 → 2.44 s). Killed, it leaves no work behind: auto's second process
  watches its parent, treewidth's ends at its next message.
* :class:`DaskExecutor`: tasks on a Dask distributed cluster (``pip install
  'remat-cli[dask]'``); with a timeout each task runs in a child process on its worker.

Both yield :class:`Event`\\ s in completion order; callers sort by index for deterministic
output. Both stop early (killing running work) when ``should_stop()`` turns true, which
is how Ctrl-C is handled without losing the results so far.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait as mp_wait
from typing import Any

from remat_cli.errors import InputError
from remat_cli.units import Fact, Phrase

__all__ = ["Outcome", "Event", "LocalExecutor", "DaskExecutor", "make_executor", "run_isolated", "describe_exit", "end_with_parent"]

# How often (seconds) the dispatch loops look at ``should_stop`` while waiting.
_POLL = 0.2


@dataclass(frozen=True)
class Outcome:
    """What one call produced: ``value``, or a ``failure`` kind with a one-line message.

    ``failure`` is ``None`` (success), ``"timeout"``, ``"crash"`` (the worker died) or
    ``"error"`` (the function raised; ``message`` names the exception).
    """

    value: Any = None
    failure: str | None = None
    message: str = ""


@dataclass(frozen=True)
class Event:
    """``kind`` is ``"start"`` (``outcome`` is None) or ``"done"``, for input ``index``."""

    kind: str
    index: int
    outcome: Outcome | None = None


def end_with_parent(every: float = 0.5) -> None:
    """In a second process forked for one run (auto's, a sweep's): end it within ``every``
    seconds of its parent's end (a thread looks), so that no work outlives a run that was
    killed (its results would have no one to go to)."""
    import threading

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(every)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def describe_exit(exitcode: int | None) -> str:
    """'signal SIGSEGV' / 'exit status 3' for a dead worker's exit code."""
    if exitcode is None:
        return "an unknown cause"
    if exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit status {exitcode}"


def _call(fn: Callable[[Any], Any], arg: Any) -> Outcome:
    try:
        return Outcome(value=fn(arg))
    except Exception as exc:  # the worker must answer, whatever the function does
        return Outcome(failure="error", message=f"{type(exc).__name__}: {exc}")


# --------------------------------------------------------------------------- local


def _worker_loop(conn: Any, memory_limit: int | None = None, spare: bool = False) -> None:
    """Body of a local worker: answer ``(fn, arg)`` requests until told to stop.

    ``memory_limit`` caps the worker's address space, so a file that needs more ends in a
    ``MemoryError`` (a row) rather than in the machine swapping. ``spare``: the worker has
    a core to itself besides its own, so it stops counting itself a daemon here, where
    auto and treewidth look before they fork their second process (and multiprocessing,
    which forks no child of a daemon); the first process still treats it as one, and
    ends it at exit.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what Ctrl-C stops
    if spare:
        multiprocessing.current_process().daemon = False
    if memory_limit:
        from remat_cli.limits import set_memory_limit

        set_memory_limit(memory_limit)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        fn, arg = msg
        conn.send(_call(fn, arg))


@dataclass(eq=False)
class _Worker:
    """A worker process, its end of the pipe, and the task it runs (index, deadline)."""

    proc: Any
    conn: Any
    task: int | None = None
    deadline: float | None = None

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()


def _context() -> Any:
    """forkserver where it exists (safe with threads, cheap to fork), else spawn."""
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["remat_cli.batch"])
        return ctx
    return multiprocessing.get_context("spawn")


class LocalExecutor:
    """``jobs`` worker processes on this machine; ``timeout`` seconds per call (None: no limit).

    ``memory_limit``: bytes of address space each worker may use (None: inherited).
    """

    def __init__(self, jobs: int | None = None, timeout: float | None = None, memory_limit: int | None = None) -> None:
        self.jobs = max(1, jobs or os.cpu_count() or 1)
        self.timeout = timeout
        self.memory_limit = memory_limit

    def describe(self) -> Phrase:
        """Where the work runs, as a fact for the report to render (``3 local workers``)."""
        return Phrase("{} local worker" if self.jobs == 1 else "{} local workers", (Fact(self.jobs, "count"),))

    def run(
        self,
        fn: Callable[[Any], Any],
        items: Sequence[Any],
        should_stop: Callable[[], bool] = lambda: False,
    ) -> Iterator[Event]:
        """Call ``fn`` on every item; yield start/done events as they happen.

        Workers are killed when the generator is closed early (``break``, an exception in
        the caller, ``should_stop()``), so no work outlives the run.
        """
        ctx = _context()
        pending = deque(range(len(items)))
        workers: list[_Worker] = []
        retired: list[_Worker] = []

        # at least twice as many jobs as items: each worker has a spare core, and its plans
        # may use it (auto's and treewidth's second process)
        spare = 0 < 2 * len(items) <= self.jobs

        def spawn() -> _Worker:
            parent, child = ctx.Pipe(duplex=True)
            proc = ctx.Process(target=_worker_loop, args=(child, self.memory_limit, spare), daemon=True, name="remat-worker")
            proc.start()
            child.close()
            return _Worker(proc, parent)

        try:
            for _ in range(min(self.jobs, len(items))):
                workers.append(spawn())
            while pending or any(w.task is not None for w in workers):
                if should_stop():
                    return
                for k, w in enumerate(workers):
                    if w.task is None and pending:
                        index = pending.popleft()
                        try:
                            w.conn.send((fn, items[index]))
                        except OSError:  # the idle worker died (e.g. the OOM killer): replace it
                            w.kill()
                            w = workers[k] = spawn()
                            w.conn.send((fn, items[index]))
                        w.task = index
                        w.deadline = None if self.timeout is None else time.monotonic() + self.timeout
                        yield Event("start", index)
                busy = [w for w in workers if w.task is not None]
                now = time.monotonic()
                deadlines = [w.deadline for w in busy if w.deadline is not None]
                wait_for = _POLL if not deadlines else max(0.0, min(_POLL, min(deadlines) - now))
                ready = set(mp_wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], wait_for))
                now = time.monotonic()
                for k, w in enumerate(workers):
                    if w.task is None:
                        continue
                    index = w.task
                    outcome: Outcome | None = None
                    replace = False
                    if w.conn in ready:
                        try:
                            outcome = w.conn.recv()
                        except (EOFError, OSError):
                            w.proc.join(5)
                            outcome = Outcome(failure="crash", message=f"the worker died ({describe_exit(w.proc.exitcode)})")
                            replace = True
                    elif w.proc.sentinel in ready:
                        w.proc.join(5)
                        outcome = Outcome(failure="crash", message=f"the worker died ({describe_exit(w.proc.exitcode)})")
                        replace = True
                    elif w.deadline is not None and now >= w.deadline:
                        outcome = Outcome(failure="timeout", message=f"no result within {self.timeout:g} s; the worker was stopped")
                        replace = True
                    if outcome is None:
                        continue
                    if replace:
                        w.kill()
                        if pending:
                            workers[k] = spawn()
                        else:
                            retired.append(w)
                    else:
                        w.task = None
                        w.deadline = None
                    yield Event("done", index, outcome)
                workers = [w for w in workers if w not in retired]
        finally:
            for w in workers:
                if w.task is None and w.proc.is_alive():
                    try:
                        w.conn.send(None)
                    except OSError:
                        pass
            for w in workers:
                if w.task is not None:
                    w.proc.kill()
            for w in workers:
                w.proc.join(2)
                if w.proc.is_alive():
                    w.proc.kill()
                    w.proc.join(2)
                w.conn.close()


# --------------------------------------------------------------------------- isolated call


def make_executor(
    kind: str, scheduler: str | None, jobs: int | None, timeout: float | None, memory_limit: int | None = None
) -> LocalExecutor | DaskExecutor:
    """The executor ``--executor KIND`` names: ``local`` (``jobs`` workers, each held to
    ``memory_limit``) or ``dask`` (the cluster at ``scheduler``); ``timeout`` per task."""
    if kind == "dask":
        return DaskExecutor(scheduler or "", timeout=timeout)
    if scheduler:
        raise InputError("--scheduler needs --executor dask")
    return LocalExecutor(jobs, timeout=timeout, memory_limit=memory_limit)


def run_isolated(fn: Callable[[Any], Any], arg: Any, timeout: float | None) -> Outcome:
    """Call ``fn(arg)`` in a fresh ``python`` child process, killed after ``timeout`` seconds.

    Used on Dask workers, which are daemonic processes and may not fork ``multiprocessing``
    children; a plain subprocess is allowed.
    """
    # The child sees this process's import path, so ``fn`` unpickles wherever it came from.
    inner = pickle.dumps((fn, arg), protocol=pickle.HIGHEST_PROTOCOL)
    payload = pickle.dumps((list(sys.path), inner), protocol=pickle.HIGHEST_PROTOCOL)
    cmd = [sys.executable, "-c", "from remat_cli.executors import _isolated_main; _isolated_main()"]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        out, _ = proc.communicate(payload, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return Outcome(failure="timeout", message=f"no result within {timeout:g} s; the worker was stopped")
    if proc.returncode != 0 or not out:
        return Outcome(failure="crash", message=f"the worker died ({describe_exit(proc.returncode)})")
    return pickle.loads(out)


def _isolated_main() -> None:
    """Child side of :func:`run_isolated`: read (fn, arg) on stdin, write the Outcome on stdout."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    path, inner = pickle.loads(sys.stdin.buffer.read())
    sys.path[:0] = [p for p in path if p not in sys.path]
    fn, arg = pickle.loads(inner)
    outcome = _call(fn, arg)
    sys.stdout.buffer.write(pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.flush()


def _dask_task(fn: Callable[[Any], Any], arg: Any, timeout: float | None) -> Outcome:
    """What runs on a Dask worker: isolated in a child when a timeout must be enforced."""
    if timeout is None:
        return _call(fn, arg)
    return run_isolated(fn, arg, timeout)


# --------------------------------------------------------------------------- dask


class DaskExecutor:
    """Tasks on a Dask distributed cluster at ``address`` (``tcp://host:8786``).

    Workers must be able to import ``remat_cli`` and read the input paths (a shared file
    system); results come back to this process, which writes every output file.
    """

    def __init__(self, address: str, timeout: float | None = None) -> None:
        if not address:
            raise InputError("--executor dask needs --scheduler ADDRESS (e.g. tcp://127.0.0.1:8786)")
        self.address = address
        self.timeout = timeout

    def describe(self) -> Phrase:
        """Where the work runs, as a fact for the report to render."""
        return Phrase("dask cluster at {}", (self.address,))

    def run(
        self,
        fn: Callable[[Any], Any],
        items: Sequence[Any],
        should_stop: Callable[[], bool] = lambda: False,
    ) -> Iterator[Event]:
        """Submit every item, yield start events, then done events as futures finish."""
        try:
            import distributed
        except ImportError:
            raise InputError("--executor dask needs Dask distributed: pip install 'remat-cli[dask]'") from None
        try:
            client = distributed.Client(self.address, timeout="10s", set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise InputError(f"cannot reach the Dask scheduler at {self.address}: {exc}") from None
        futures: dict[Any, int] = {}
        try:
            for index, item in enumerate(items):
                fut = client.submit(_dask_task, fn, item, self.timeout, pure=False, key=f"remat-{index}-{os.getpid()}-{time.time_ns()}")
                futures[fut] = index
                yield Event("start", index)
            remaining = dict(futures)
            while remaining:
                if should_stop():
                    return
                done = sorted((index, fut) for fut, index in remaining.items() if fut.done())
                if not done:
                    time.sleep(_POLL / 4)
                for index, fut in done:
                    del remaining[fut]
                    yield Event("done", index, _dask_outcome(fut))
        finally:
            pending = [f for f in futures if not f.done()]
            if pending:
                client.cancel(pending, force=True)
            client.close()


def _dask_outcome(fut: Any) -> Outcome:
    if fut.status == "finished":
        return fut.result()
    try:
        exc = fut.exception()
    except Exception as err:  # cancelled futures raise here
        return Outcome(failure="crash", message=f"the task was lost: {err}")
    name = type(exc).__name__
    if name == "KilledWorker":
        return Outcome(failure="crash", message="the task killed its Dask workers repeatedly")
    return Outcome(failure="error", message=f"{name}: {exc}")
