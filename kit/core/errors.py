"""The error types for bad input, in the core so every layer (store, API, services,
CLI) raises the same ones without importing the layer above: a `FieldError` names the
field and the reason (the API answers 422, the CLI prints one line and exits 2); a
`UsageError` is bad input on the command line (one line, exit 2)."""

from __future__ import annotations

from collections.abc import Callable


class FieldError(ValueError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason

    @property
    def problems(self) -> list[tuple[str, str]]:
        """Every (field, reason) this error stands for: one, or each of FieldErrors'."""
        return [(self.field, self.reason)]

    def nested(self, prefix: str) -> FieldError:
        """The same error seen from an enclosing object (`schedule` + `cron`)."""
        return FieldError(f"{prefix}.{self.field}", self.reason)


class FieldErrors(FieldError):
    """Several fields of one object are wrong at once (a cron and its zone): each is
    reported, so a client fixes them in one go. `field` and `reason` are the first's, for
    callers that show one line."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        if not problems:
            raise ValueError("FieldErrors needs at least one problem")
        super().__init__(*problems[0])
        self._problems = list(problems)
        self.args = ("; ".join(f"{f}: {r}" for f, r in problems),)

    @property
    def problems(self) -> list[tuple[str, str]]:
        return list(self._problems)

    def nested(self, prefix: str) -> FieldError:
        return FieldErrors([(f"{prefix}.{f}", r) for f, r in self._problems])


def all_of(*checks: Callable[[], object]) -> None:
    """Run each check (a callable that may raise FieldError) and raise every problem
    they found together: FieldError for one, FieldErrors for more."""
    found: list[tuple[str, str]] = []
    for check in checks:
        try:
            check()
        except FieldError as exc:
            found += exc.problems
    if len(found) == 1:
        raise FieldError(*found[0])
    if found:
        raise FieldErrors(found)


class UsageError(Exception):
    """Bad input on the command line: printed as one line, exit code 2."""


class ShardProblem(Exception):
    """A shard the deployment names cannot be used as it is (down, or at another schema
    revision than the rest): a service refuses to start on it, saying which and why."""
