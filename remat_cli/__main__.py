"""Allow ``python -m remat_cli``; also the ``remat`` console entry point.

``remat --version`` answers before click and the commands are imported: start-up time
matters for a command-line tool (issue 14).

Every other run skips the garbage collections of interpreter shutdown for the objects that
exist when it ends: they would walk everything numpy, click and rich made (tens of ms of a
`remat plan` run) to free memory that the ending process hands back anyway. Atexit
handlers, buffered files and every object freed by reference counting are unaffected.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Console entry point: the version fast path, else the click command line."""
    if sys.argv[1:] in (["--version"], ["-V"]):
        from remat_cli import __version__

        print(f"remat, version {__version__}")
        return
    import atexit
    import gc

    atexit.register(gc.freeze)  # runs last: the collections at exit skip what exists then
    from remat_cli.cli import main as cli_main

    cli_main()


if __name__ == "__main__":  # pragma: no cover
    main()
