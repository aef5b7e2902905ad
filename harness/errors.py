"""Errors the CLI turns into exit codes (see docs/history.md §5)."""


class UserError(Exception):
    """Bad arguments, input or environment: exit 254 with a message that says what to do."""

    exit_code = 254
