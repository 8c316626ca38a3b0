"""The one project exception type, turned into one line and an exit code by the CLI."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # a check failed or no plan fits
EXIT_BAD_INPUT = 2  # bad usage or unreadable input


class RematError(Exception):
    """An expected failure: ``message`` is shown as one line, ``exit_code`` ends the CLI."""

    exit_code: int = EXIT_BAD_INPUT

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class InputError(RematError):
    """Unreadable or inconsistent input (a graph file, a plan file, an option): exit 2."""

    exit_code = EXIT_BAD_INPUT


class NoPlanError(RematError):
    """No plan meets the budget: exit 1. ``min_budget`` is the smallest budget known to work."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, min_budget: int | None = None) -> None:
        super().__init__(message)
        self.min_budget = min_budget


class InvalidScheduleError(RematError):
    """A schedule broke the rules of DESIGN §1 at some step: exit 1."""

    exit_code = EXIT_FAILED
