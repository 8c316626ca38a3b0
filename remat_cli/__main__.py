"""Allow ``python -m remat_cli``."""

from remat_cli.cli import main

if __name__ == "__main__":  # pragma: no cover
    main()
