"""`cronfleet stack up | down | status`: the local PostgreSQL and Kafka the kit and its
tests run against. Progress goes to stderr; `up` prints the connection settings on
stdout and writes them to $CRONFLEET_HOME/stack.env, which `load_settings()` reads.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from typing import Protocol

from kit.settings import stack_env_file
from kit.stack.process import StackError, load_state

KAFKA_PREFERRED_PORT = 59092


class Service(Protocol):
    def up(self) -> None: ...
    def down(self) -> None: ...
    def answers(self) -> bool: ...


SERVICE_NAMES = ("postgres", "kafka")


def service(name: str) -> Service:
    if name == "postgres":
        from kit.stack.postgres import Postgres

        return Postgres.default()
    from kit.stack.kafka.broker import Broker

    return Broker.default()


def address(name: str) -> str:
    if name == "postgres":
        from kit.stack.postgres import Postgres

        return Postgres.default().url()
    return f"127.0.0.1:{load_state().get('kafka_port', KAFKA_PREFERRED_PORT)}"


def connection_settings() -> dict[str, str]:
    return {
        "CRONFLEET_DATABASE_URL": address("postgres"),
        "CRONFLEET_KAFKA_BOOTSTRAP": address("kafka"),
        # one broker: the run topics cannot have more replicas than that
        "CRONFLEET_RUN_TOPIC_REPLICATION": "1",
        "CRONFLEET_RUN_TOPIC_MIN_INSYNC": "1",
    }


def write_stack_env(settings: dict[str, str]) -> None:
    """The connection settings, readable by their owner only (0600): the database URL
    carries the password."""
    from kit.stack.postgres import write_private

    path = stack_env_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# written by `cronfleet stack up`; read by kit.settings.load_settings()"]
    lines += [f"{key}={value}" for key, value in settings.items()]
    write_private(path, "\n".join(lines) + "\n")


def _selected(args: argparse.Namespace) -> Iterable[str]:
    return SERVICE_NAMES if args.only is None else (args.only,)


def up(args: argparse.Namespace) -> int:
    from kit.settings import cronfleet_home
    from kit.stack.private import PRIVATE_UMASK, secure_home, tighten
    from kit.stack.process import progress

    os.umask(PRIVATE_UMASK)  # what `up` and the servers it starts create: 0600 / 0700
    home = cronfleet_home()
    secure_home(home)
    if changed := tighten(home):
        progress(f"stack: took group and other permissions off {changed} entries in {home}")
    for name in _selected(args):
        service(name).up()
    tighten(home)  # what a tool copied keeping its own modes (Maven's jars: 0644)
    settings = connection_settings()
    write_stack_env(settings)
    print(f"  stack: settings written to {stack_env_file()}", file=sys.stderr)
    for key, value in settings.items():
        print(f"{key}={value}")
    return 0


def down(args: argparse.Namespace) -> int:
    # reverse order: the broker first, the database last
    for name in reversed(tuple(_selected(args))):
        service(name).down()
    return 0


def status(args: argparse.Namespace) -> int:
    all_answer = True
    for name in _selected(args):
        answers = service(name).answers()
        all_answer &= answers
        shown = address(name)
        if name == "postgres":  # the URL carries the password
            from sqlalchemy.engine import make_url

            shown = make_url(shown).render_as_string(hide_password=True)
        print(f"{name:<9} {shown:<70} {'answers' if answers else 'DOWN'}")
        if name == "kafka":
            from kit.stack.kafka.broker import Broker
            from kit.stack.process import port_answers

            broker = Broker.default()
            tls = port_answers(broker.tls_port)
            all_answer &= tls
            shown = f"{broker.tls_bootstrap()} (CA {broker.ca_file})"
            print(f"{'kafka-tls':<9} {shown:<70} {'answers' if tls else 'DOWN'}")
    return 0 if all_answer else 1


def _guarded(func):  # type: ignore[no-untyped-def]
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except StackError as exc:
            print(f"cronfleet stack {args.stack_command}: {exc}", file=sys.stderr)
            return 1

    return run


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("stack", help="local PostgreSQL and Kafka: up, down, status")
    actions = parser.add_subparsers(dest="stack_command", metavar="ACTION", required=True)
    for name, func, help_text in (
        ("up", up, "install what is missing, start, wait until it answers (idempotent)"),
        ("down", down, "stop what `up` started"),
        ("status", status, "each service, its address, whether it answers (exit 1 if not)"),
    ):
        action = actions.add_parser(name, help=help_text)
        action.add_argument("--only", choices=SERVICE_NAMES, help="just this service")
        action.set_defaults(func=_guarded(func))
