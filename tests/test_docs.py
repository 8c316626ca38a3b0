"""The console examples in README.md and docs/*.md, without planning anything.

``scripts/check_docs.py`` runs the examples and compares their output (minutes); these
tests check in seconds what can go stale without running them: every block parses with a
well-formed marker, every ``remat`` command in it (run or marked skip) is accepted by the
command line's parser, rewriting a block that matches leaves it byte for byte, and only
the fields the script lists as varying are masked.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import click
import pytest

from remat_cli.cli import cli

ROOT = Path(__file__).resolve().parents[1]


def _load_check_docs():
    spec = importlib.util.spec_from_file_location("check_docs", ROOT / "scripts" / "check_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_docs"] = module
    spec.loader.exec_module(module)
    return module


cd = _load_check_docs()
BLOCKS = [b for p in cd.doc_files() for b in cd.parse_blocks(p)]
COMMANDS = [(b, c) for b in BLOCKS for c in b.commands if c.argv[:1] == ["remat"]]


def _remat_args(argv: list[str]) -> list[str]:
    """The arguments remat sees: the words before a shell operator (``> rows.json``, ``&``)."""
    out = []
    for word in argv[1:]:
        if word in (">", ">>", "|", "&", "&&", ";", "2>", "<"):
            break
        out.append(word)
    return out


def test_the_docs_have_console_blocks_to_check() -> None:
    run = [b for b in BLOCKS if b.skip is None]
    assert len(BLOCKS) >= 10 and len(run) >= 3
    for b in run:  # a run block shows remat commands with their output
        assert b.commands and all(c.argv[0] == "remat" for c in b.commands), b.where
        assert any(c.shown for c in b.commands), b.where


@pytest.mark.parametrize("block,command", COMMANDS, ids=[f"{b.where} {c.argv[1]}" for b, c in COMMANDS])
def test_every_remat_command_parses(block, command) -> None:
    """Options and arguments as the CLI declares them (a renamed flag fails here)."""
    args = _remat_args(command.argv)
    root = click.Context(cli, info_name="remat")
    sub = cli.get_command(root, args[0])
    assert sub is not None, f"{block.where}: no command {args[0]!r}"
    with root:
        sub.make_context(args[0], args[1:], parent=root)  # raises click.UsageError if not


@pytest.mark.parametrize("path", cd.doc_files(), ids=lambda p: p.name)
def test_rewriting_a_matching_block_changes_nothing(path: Path) -> None:
    lines = path.read_text().splitlines()
    for b in cd.parse_blocks(path, lines):
        assert cd.render(b, {}) == lines[b.start : b.end + 1], b.where


def _doc(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "doc.md"
    path.write_text(text)
    return path


def test_markers_are_parsed_and_bad_ones_refused(tmp_path: Path) -> None:
    ok = "<!-- check-docs: skip: needs a cluster -->\n\n```console\n$ remat batch x/\nrow\n```\n\n```console\n$ remat info g.json\nout\n\n```\n"
    skip, run = cd.parse_blocks(_doc(tmp_path, ok))
    assert skip.skip == "needs a cluster" and skip.commands[0].shown == ["row"]
    assert run.skip is None and run.commands[0].argv == ["remat", "info", "g.json"] and run.commands[0].shown == ["out"]
    for bad in (
        "<!-- check-docs: skip -->\n```console\n$ remat info g\n```\n",  # no reason
        "<!-- check-docs: skipp: typo -->\n```console\n$ remat info g\n```\n",
        "<!-- check-docs: skip: orphan -->\n\ntext\n\n```console\n$ remat info g\n```\n",
        "```console\n$ remat info g\n",  # never closed
        "```console\noutput first\n$ remat info g\n```\n",
    ):
        with pytest.raises(cd.DocError):
            cd.parse_blocks(_doc(tmp_path, bad))


def test_only_the_listed_fields_are_masked() -> None:
    plan = ["solve time           829 ms", "cost                 34.9 ms  (base 33.3 ms)", "treewidth seconds      0.007"]
    assert cd.normalise(plan, False) == ["solve time           <time>", plan[1], "treewidth seconds      <time>"]
    row = "auto (chain-dp)  1,362  12.0 MiB    +60.9%     1.91 s    712.9"
    gain = "throughput gain +43.7% (batch/s: 1,362 with recomputation vs 628 without)"
    assert cd.normalise([row, gain], False) == [row, gain]  # an ONNX model's roofline estimate
    measured = cd.normalise([row, gain], True)  # a PyTorch factory's measured step time
    assert measured[0] == "auto (chain-dp) 1,362 12.0 MiB +60.9% <time> <rate>"
    assert measured[1] == "throughput gain <change> (batch/s: 1,362 with recomputation vs 628 without)"
    assert cd.normalise(["auto (chain-dp)  1,363  12.0 MiB    +60.9%     1.91 s    712.9"], True) != measured[:1]
    assert cd.is_factory(["remat", "fit", "examples/mlp.py:make", "--dim", "batch=?"])
    assert not cd.is_factory(["remat", "fit", "sample_graphs/unet.onnx", "--dim", "batch=?"])
