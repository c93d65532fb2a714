"""The error types for bad input, in the core so every layer (store, API, services,
CLI) raises the same ones without importing the layer above: a `FieldError` names the
field and the reason (the API answers 422, the CLI prints one line and exits 2); a
`UsageError` is bad input on the command line (one line, exit 2)."""

from __future__ import annotations


class FieldError(ValueError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason

    def nested(self, prefix: str) -> FieldError:
        """The same error seen from an enclosing object (`schedule` + `cron`)."""
        return FieldError(f"{prefix}.{self.field}", self.reason)


class UsageError(Exception):
    """Bad input on the command line: printed as one line, exit code 2."""
