"""The one error type for bad input: it names the field and the reason, so the API
can answer 422 and the CLI can print one line and exit 2."""

from __future__ import annotations


class FieldError(ValueError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason

    def nested(self, prefix: str) -> FieldError:
        """The same error seen from an enclosing object (`schedule` + `cron`)."""
        return FieldError(f"{prefix}.{self.field}", self.reason)
