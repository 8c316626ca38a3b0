#!/usr/bin/env python3
"""Check that every ``console`` example in README.md and docs/*.md prints what it shows.

    python scripts/check_docs.py              # run every example, print a diff per mismatch
    python scripts/check_docs.py --update     # rewrite the mismatched blocks in place
    python scripts/check_docs.py --list       # the blocks found and what would run

A console block is a fenced block opened with three backticks and ``console``. Each line
starting with ``$ `` is a command; the lines after it, up to the next ``$ `` line, are its
output. Every ``$ remat ...`` command of a block is run and its standard output compared
with those lines (trailing spaces and trailing blank lines aside); stderr (progress, warnings)
is not part of an example. Exit code 0 or 1 (no plan fits, a check failed) is accepted;
any other code, a timeout, or a command that is not ``remat`` is a failure.

**Marker.** A block that is not meant to be run (it needs files that are not in the
repository, a cluster, or minutes of work; or it lists commands without their output) is
marked by an HTML comment on the line just before its opening fence:

    <!-- check-docs: skip: REASON -->

REASON is required and says why in words (it is not rendered). Any other comment starting
with ``<!-- check-docs`` is an error, so a misspelt marker never silently skips a block.

**How commands run.** Each block in its own copy of the repository root (the files
``git ls-files`` lists, tracked or untracked but not ignored) in a temporary folder, so
that commands writing files (``--plot docs/tradeoff.png``, ``-o plan.json``) leave the
working tree alone and a block's later commands see what its earlier ones wrote; its
commands in order, as ``python -m remat_cli`` with ``COLUMNS=80`` and colour off (piped
output is plain), each with a timeout (``--timeout``, seconds); ``-j`` blocks at once.

**Run time** (2 shared cores, -j 2): about 5 minutes, most of it the ``remat fit`` of a
PyTorch factory (``examples/mlp.py``: a real training step per probe); the other
examples take under a minute together. ``--only TEXT`` runs just the commands whose line
contains TEXT.

**Fields that may vary** (masked on both sides before comparing; ``--update`` leaves a
block alone when it matches except for them):

* ``solve time`` in ``remat plan``'s table, and every ``... seconds`` line whose value
  is a bare number (``treewidth seconds`` in ``remat info``, ``decompose seconds`` and
  ``schedule seconds`` in ``plan -v``): wall-clock times of this run. ``est. seconds``
  (an estimate, with a unit) is not masked.
* For a PyTorch factory (``FILE.py:FACTORY``, whose step times are measured on this CPU
  during capture, not estimated): in ``remat fit``'s table the ``est. step`` and
  ``batch/s`` columns and the ``throughput gain`` percentage; lines are then compared
  with runs of spaces collapsed, since column widths follow the measured values.

Roofline and per-node time estimates (``est. step`` of an ONNX model, ``cost 34.9 ms``)
are computed, not measured, and are compared exactly.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!--\s*check-docs:\s*skip:\s*(?P<reason>\S.*?)\s*-->$")
ANY_MARKER = re.compile(r"^<!--\s*check-docs\b")
FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})console[ \t]*$")
TIMEOUT_S = 600.0

#: (line pattern, replacement) masks for every command: fields timed by this run.
ALWAYS_MASKED: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(solve time\s+)\S.*$"), r"\1<time>"),
    (re.compile(r"^((?!est\.)[a-z ]*\bseconds\s+)[\d.]+$"), r"\1<time>"),
)
#: Extra masks for a command whose target is a PyTorch factory (measured step times).
_DURATION = r"[\d.,]+ (?:ns|µs|ms|s|min|h|days)"
MEASURED_MASKED: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"^(.*\S\s+[+-][\d.,]+%\s+){_DURATION}\s+[\d.,]+$"), r"\1<time> <rate>"),
    (re.compile(r"^throughput gain [+-][\d.,]+%"), "throughput gain <change>"),
)


@dataclass
class Command:
    """One ``$`` line of a block and the output lines the document shows for it."""

    text: str  # after "$ ", as written (comments included)
    argv: list[str]  # shlex split, comments dropped
    shown: list[str]


@dataclass
class Block:
    """One console block: where it is, its marker and its commands."""

    path: Path
    start: int  # index of the opening fence line
    end: int  # index of the closing fence line
    indent: str
    fence: str  # the opening fence's characters, reused when the block is rewritten
    skip: str | None  # the marker's reason, None when the block is run
    commands: list[Command] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.start + 1}"


class DocError(Exception):
    """A document that this script cannot check as written (bad marker, unclosed fence)."""


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md, then docs/*.md in name order."""
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if p.exists()]


def parse_blocks(path: Path, lines: list[str] | None = None) -> list[Block]:
    """Every console block of ``path`` with its marker and commands.

    Raises :class:`DocError` for a ``check-docs`` comment that is not a well-formed
    marker directly before a console block, and for a console block that is never closed.
    """
    lines = path.read_text().splitlines() if lines is None else lines
    blocks: list[Block] = []
    claimed: set[int] = set()
    i = 0
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = m["indent"], m["fence"]
        close = re.compile(rf"^{re.escape(indent)}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        if j == len(lines):
            raise DocError(f"{path.name}:{i + 1}: console block never closed")
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        skip = None
        if k >= 0 and ANY_MARKER.match(lines[k].strip()):
            mm = MARKER.match(lines[k].strip())
            if mm is None:
                raise DocError(f"{path.name}:{k + 1}: bad marker {lines[k].strip()!r} (expected <!-- check-docs: skip: REASON -->)")
            skip = mm["reason"]
            claimed.add(k)
        block = Block(path, i, j, indent, fence, skip)
        for raw in lines[i + 1 : j]:
            line = raw[len(indent) :] if raw.startswith(indent) else raw.lstrip()
            if line.startswith("$ "):
                text = line[2:]
                try:
                    argv = shlex.split(text, comments=True)
                except ValueError as exc:
                    raise DocError(f"{path.name}: {text!r} does not parse as a shell line ({exc})") from None
                block.commands.append(Command(text, argv, []))
            elif block.commands:
                block.commands[-1].shown.append(line.rstrip())
            elif line.strip():
                raise DocError(f"{path.name}:{i + 2}: console block starts with output, not a '$ ' command")
        for c in block.commands:
            while c.shown and not c.shown[-1]:
                c.shown.pop()
        blocks.append(block)
        i = j + 1
    for n, line in enumerate(lines):
        if ANY_MARKER.match(line.strip()) and n not in claimed:
            raise DocError(f"{path.name}:{n + 1}: check-docs marker not directly before a console block")
    return blocks


def is_factory(argv: list[str]) -> bool:
    """Whether a command's target is a PyTorch factory (``FILE.py:NAME``): its times are measured."""
    return any(re.fullmatch(r"[^:\s]+\.py:[A-Za-z_]\w*", a) for a in argv[2:])


def normalise(lines: list[str], measured: bool) -> list[str]:
    """``lines`` with the varying fields masked (see the module docstring)."""
    rules = ALWAYS_MASKED + (MEASURED_MASKED if measured else ())
    out = []
    for line in lines:
        line = line.rstrip()
        for pattern, repl in rules:
            line = pattern.sub(repl, line)
        out.append(" ".join(line.split()) if measured else line)
    while out and not out[-1]:
        out.pop()
    return out


@dataclass
class Result:
    """What one command printed, or why it did not run to an accepted end."""

    lines: list[str]
    failure: str | None  # None: exit 0 or 1 within the timeout
    seconds: float


def run_command(argv: list[str], workdir: Path, timeout: float) -> Result:
    """Run ``remat ARGS`` as ``python -m remat_cli ARGS`` in ``workdir``."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "CLICOLOR_FORCE")}
    env.update(COLUMNS="80", NO_COLOR="1", TERM="dumb", PYTHONHASHSEED="0", PYTHONPATH=str(workdir))
    t0 = time.perf_counter()
    try:
        res = subprocess.run(
            [sys.executable, "-m", "remat_cli", *argv[1:]],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return Result([], f"timed out after {timeout:g} s", time.perf_counter() - t0)
    seconds = time.perf_counter() - t0
    lines = [line.rstrip() for line in res.stdout.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if res.returncode not in (0, 1):
        last = res.stderr.strip().splitlines()[-1:] or ["(no stderr)"]
        return Result(lines, f"exit code {res.returncode}: {last[0]}", seconds)
    return Result(lines, None, seconds)


def copy_tree(root: Path, dest: Path) -> None:
    """Copy the repository's files (tracked or untracked, not ignored) to ``dest``."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout.decode()
        names = [n for n in listed.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: everything but caches
        skip = {".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", ".ruff_cache"}
        names = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not skip & set(p.parts)]
    for name in names:
        src = root / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def render(block: Block, outputs: dict[int, list[str]]) -> list[str]:
    """The block's lines (fences included) with command ``i``'s output replaced by ``outputs[i]``."""
    body = [f"{block.indent}{block.fence}console"]
    for i, c in enumerate(block.commands):
        body.append(f"{block.indent}$ {c.text}")
        body += [(block.indent + line).rstrip() for line in outputs.get(i, c.shown)]
    return body + [block.indent + block.fence]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path, help="documents to check (default: README.md and docs/*.md)")
    ap.add_argument("--update", action="store_true", help="rewrite mismatched blocks with what the commands print")
    ap.add_argument("--list", action="store_true", help="list the blocks and their commands; run nothing")
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help=f"seconds per command (default {TIMEOUT_S:g})")
    ap.add_argument("--only", action="append", metavar="TEXT", help="run only commands containing TEXT (repeatable)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="blocks run at once (default 2)")
    args = ap.parse_args(argv)

    files = [p.resolve() for p in args.files] or doc_files()
    try:
        blocks = [b for p in files for b in parse_blocks(p)]
    except DocError as exc:
        print(f"check_docs: {exc}", file=sys.stderr)
        return 2
    if args.list:
        for b in blocks:
            print(f"{b.where}: " + (f"skip: {b.skip}" if b.skip else f"{len(b.commands)} command(s)"))
            for c in b.commands:
                print(f"    $ {c.text}" + ("" if b.skip else f"   [{len(c.shown)} output lines]"))
        return 0

    bad = [
        f"{b.where}: '$ {c.text}' is not a remat command; mark the block <!-- check-docs: skip: REASON -->"
        for b in blocks
        if b.skip is None
        for c in b.commands
        if not c.argv or c.argv[0] != "remat"
    ]
    if bad:
        print("\n".join(bad), file=sys.stderr)
        return 2
    jobs = [
        (b, i) for b in blocks if b.skip is None for i, c in enumerate(b.commands) if not args.only or any(o in c.text for o in args.only)
    ]
    t0 = time.perf_counter()
    by_block: dict[int, list[int]] = {}
    for n, (b, _) in enumerate(jobs):
        by_block.setdefault(id(b), []).append(n)
    results: list[Result | None] = [None] * len(jobs)

    def run_block(ns: list[int]) -> None:
        """One block's commands in order, in a fresh copy of the tree (a later command
        may read what an earlier one wrote; blocks never see each other's files)."""
        with tempfile.TemporaryDirectory(prefix="check-docs-") as tmp:
            copy_tree(ROOT, Path(tmp))
            for n in ns:
                block, i = jobs[n]
                results[n] = run_command(block.commands[i].argv, Path(tmp), args.timeout)

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        list(pool.map(run_block, by_block.values()))

    mismatched: dict[int, dict[int, list[str]]] = {}  # id(block) -> command index -> new output
    failures = 0
    for (block, i), res in zip(jobs, results, strict=True):
        assert res is not None
        c = block.commands[i]
        measured = is_factory(c.argv)
        print(f"{block.where}: $ {c.text}  ({res.seconds:.1f} s)", file=sys.stderr)
        if res.failure is not None:
            failures += 1
            print(f"FAILED {block.where}: $ {c.text}\n    {res.failure}")
            continue
        if normalise(c.shown, measured) == normalise(res.lines, measured):
            continue
        mismatched.setdefault(id(block), {})[i] = res.lines
        diff = difflib.unified_diff(c.shown, res.lines, "shown", "printed", lineterm="", n=2)
        print(f"MISMATCH {block.where}: $ {c.text}")
        print("\n".join("    " + line for line in diff))
    skipped = sum(1 for b in blocks if b.skip is not None)
    changed = sum(len(v) for v in mismatched.values())
    print(
        f"check_docs: {len(jobs)} commands in {len({id(b) for b, _ in jobs})} blocks run ({skipped} blocks marked skip), "
        f"{changed} mismatched, {failures} failed, {time.perf_counter() - t0:.0f} s",
        file=sys.stderr,
    )
    if args.update and mismatched:
        for path in sorted({b.path for b in blocks if id(b) in mismatched}):
            lines = path.read_text().splitlines()
            for b in sorted((b for b in blocks if b.path == path and id(b) in mismatched), key=lambda b: -b.start):
                lines[b.start : b.end + 1] = render(b, mismatched[id(b)])
            path.write_text("\n".join(lines) + "\n")
        print(f"check_docs: updated {changed} command outputs", file=sys.stderr)
        return 1 if failures else 0
    return 1 if failures or mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
