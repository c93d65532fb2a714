"""`cronfleet switch off|on --tenant T | --task-type TYPE | --tier TIER [--reason TEXT]`
and `cronfleet switch list`: the operator's kill switches, from a shell on the
database (as `cronfleet tokens` does), the same as the API's /v1/switches routes.

`off` stops starting runs the switch names fleet-wide (held runs stay pending and are
counted; runs already running are not stopped); `on` lifts it and applies each job's
misfire policy to the runs it held. Every change is in the switch audit log, its
actor `cli:<user>`.
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("switch", help="the operator's kill switches")
    sub = parser.add_subparsers(dest="switch_command", metavar="ACTION", required=True)
    for action, text in (
        ("off", "stop starting runs of a tenant, a task type or a tier, fleet-wide"),
        ("on", "lift a switch: its held runs go through their job's misfire policy"),
    ):
        p = sub.add_parser(action, help=text)
        which = p.add_mutually_exclusive_group(required=True)
        which.add_argument("--tenant")
        which.add_argument("--task-type")
        which.add_argument("--tier")
        p.add_argument("--reason", default="", help="why (kept in the audit log)")
        p.set_defaults(func=_off if action == "off" else _on)
    listing = sub.add_parser("list", help="switches that are off, with the runs they hold")
    listing.set_defaults(func=_list)


def _switch(args: argparse.Namespace) -> object:
    from kit.core.errors import FieldError, UsageError
    from kit.core.switches import check_reason, parse_switch
    from kit.tasks import registry

    kind, value = next(
        (k, v)
        for k, v in (("tenant", args.tenant), ("task_type", args.task_type), ("tier", args.tier))
        if v is not None
    )
    try:
        check_reason(args.reason)
        return parse_switch(kind, value, registry.names())
    except FieldError as exc:
        flag = "reason" if exc.field == "reason" else kind.replace("_", "-")
        raise UsageError(f"{flag}: {exc.reason}") from exc


def _actor() -> str:
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def _engine():  # type: ignore[no-untyped-def]
    from kit.settings import load_settings
    from kit.store.db import engine_for

    return engine_for(load_settings().database_url, pool_size=1)


def _off(args: argparse.Namespace) -> int:
    from kit.store.switches import switch_off

    state, changed = switch_off(_engine(), _switch(args), args.reason, _actor())  # type: ignore[arg-type]
    verb = "off" if changed else "already off"
    print(f"{state.switch} {verb} since {state.since.isoformat()}: {state.held} runs held")
    return 0


def _on(args: argparse.Namespace) -> int:
    from kit.api.switches import lift_grace_ms
    from kit.settings import load_settings
    from kit.store.switches import SwitchNotOff, switch_on

    switch = _switch(args)
    try:
        lifted = switch_on(
            _engine(),
            switch,  # type: ignore[arg-type]
            _actor(),
            lift_grace_ms(load_settings()),
            args.reason,
        )
    except SwitchNotOff as exc:
        print(str(exc))
        return 1
    print(
        f"{switch} on (off since {lifted.since.isoformat()}): {len(lifted.kept)} held runs "
        f"run now, {len(lifted.skipped)} skipped by their misfire policy"
    )
    return 0


def _list(args: argparse.Namespace) -> int:
    from kit.store.switches import switches_list

    for state in switches_list(_engine()):
        print(
            f"{state.kind}\t{state.value}\t{state.held} held\tsince {state.since.isoformat()}"
            f"\tby {state.actor}\t{state.reason}"
        )
    return 0
