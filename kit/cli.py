"""The `cronfleet` command. Each subcommand lives in the module of its domain and
registers itself here; imports are lazy so `cronfleet next-fires` does not load
SQLAlchemy or Kafka.

Exit codes: 0 success, 1 failure at run time, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import importlib
import importlib.util
import io
import signal
import sys

from kit.core.errors import FieldError, ShardProblem, UsageError

# subcommand name -> module that defines `register(subparsers)`; each registered
# parser sets `func`, a callable taking the parsed args and returning an exit code.
SUBCOMMANDS: dict[str, str] = {
    "stack": "kit.stack.cli",
    "db": "kit.store.cli",
    "shards": "kit.store.cli_shards",
    "tokens": "kit.store.cli_tokens",
    "switch": "kit.api.switch_cli",
    "api": "kit.api.cli",
    "scheduler": "kit.scheduler.cli",
    "worker": "kit.worker.cli",
    "reaper": "kit.reaper.cli",
    "maintenance": "kit.maintenance.cli",
    "run-all": "kit.runall",
    "next-fires": "kit.next_fires",
    "sim": "sim.cli",
    "calibrate": "sim.calibrate",
    "chaos": "chaos.cli",
}
# Commands of the model and the proof, whose libraries `pip install cronfleet` leaves out:
# the extra that brings them, and the libraries it brings (pyproject.toml's extras).
_SIM_LIBRARIES = ("simpy", "numpy", "matplotlib", "rich")
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "sim": ("sim", _SIM_LIBRARIES),
    "calibrate": ("sim", _SIM_LIBRARIES),
    "chaos": ("chaos", (*_SIM_LIBRARIES, "httpx")),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cronfleet",
        description="cronfleet: distributed job scheduler kit and its capacity model",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command, module_name in SUBCOMMANDS.items():
        extra, libraries = EXTRAS.get(command, ("", ()))
        missing = [lib for lib in libraries if importlib.util.find_spec(lib) is None]
        if missing:
            _needs_extra(sub, command, extra, ", ".join(missing))
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
                continue  # that part of the distribution is not installed
            raise
        module.register(sub)
    return parser


def _needs_extra(sub: argparse._SubParsersAction, command: str, extra: str, missing: str) -> None:
    """`cronfleet COMMAND ...` without its extra installed: one line saying which to install."""
    p = sub.add_parser(command, help=f"(needs: pip install 'cronfleet[{extra}]')", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)

    def refuse(args: argparse.Namespace) -> int:
        print(
            f"cronfleet {command}: needs the {extra!r} extra ({missing} not installed): "
            f"pip install 'cronfleet[{extra}]'",
            file=sys.stderr,
        )
        return 2

    p.set_defaults(func=refuse)


def main(argv: list[str] | None = None) -> int:
    # `kill -USR1 PID` writes every thread's stack to stderr (the service's log): where a
    # stuck worker or node waits, without stopping it. Not when stderr is no file (main()
    # called with it captured, as tests do).
    with contextlib.suppress(io.UnsupportedOperation, AttributeError, ValueError):
        faulthandler.register(signal.SIGUSR1, file=sys.stderr.fileno(), all_threads=True)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (UsageError, FieldError) as exc:
        print(f"cronfleet {args.command}: {exc}", file=sys.stderr)
        return 2
    except ShardProblem as exc:
        print(f"cronfleet {args.command}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        settings_problem = _settings_problem(exc)
        if settings_problem is None:
            raise
        print(f"cronfleet {args.command}: {settings_problem}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _settings_problem(exc: Exception) -> str | None:
    """A CRONFLEET_* setting refused by kit.settings, as one line naming the variable."""
    from pydantic import ValidationError

    from kit.settings import Settings

    if not isinstance(exc, ValidationError) or exc.title != Settings.__name__:
        return None
    return "; ".join(
        f"CRONFLEET_{str(e['loc'][0]).upper()}: {e['msg']}" if e.get("loc") else e["msg"]
        for e in exc.errors()
    )


if __name__ == "__main__":
    # `python -m kit.cli`: run the module the `cronfleet` script runs, not this
    # `__main__` copy of it.
    from kit.cli import main as kit_main

    sys.exit(kit_main())
