"""Allow ``python -m remat_cli``; also the ``remat`` console entry point.

``remat --version`` answers before click and the commands are imported: start-up time
matters for a command-line tool (issue 14).
"""

from __future__ import annotations

import sys


def main() -> None:
    """Console entry point: the version fast path, else the click command line."""
    if sys.argv[1:] in (["--version"], ["-V"]):
        from remat_cli import __version__

        print(f"remat, version {__version__}")
        return
    from remat_cli.cli import main as cli_main

    cli_main()


if __name__ == "__main__":  # pragma: no cover
    main()
