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
from kit.stack.process import StackError, load_state, save_state

KAFKA_PREFERRED_PORT = 59092


class Service(Protocol):
    def up(self) -> None: ...
    def down(self) -> None: ...
    def answers(self) -> bool: ...


SERVICE_NAMES = ("postgres", "kafka")


def shard_count() -> int:
    """How many PostgreSQL clusters the stack runs: the last `up --shards N`, else one."""
    return load_state().get("shards", 1)


def services(name: str, on_disk: bool = False) -> list[Service]:
    """What `name` stands for: every shard's cluster for postgres (`on_disk`: also those
    beyond today's count that an earlier `up` made), the broker for kafka."""
    if name == "postgres":
        from kit.settings import cronfleet_home
        from kit.stack.postgres import Postgres

        count = shard_count()
        if on_disk:
            while (cronfleet_home() / f"postgres-shard{count}").exists():
                count += 1
        return [Postgres.shard(n) for n in range(count)]
    from kit.stack.kafka.broker import Broker

    return [Broker.default()]


def address(name: str) -> str:
    if name == "postgres":
        from kit.stack.postgres import Postgres

        return Postgres.default().url()
    return f"127.0.0.1:{load_state().get('kafka_port', KAFKA_PREFERRED_PORT)}"


def shard_urls() -> str:
    """The shards beyond the home one, as CRONFLEET_SHARD_URLS takes them."""
    from kit.stack.postgres import Postgres

    return ",".join(f"shard{n}={Postgres.shard(n).url()}" for n in range(1, shard_count()))


def connection_settings() -> dict[str, str]:
    extra = {"CRONFLEET_SHARD_URLS": urls} if (urls := shard_urls()) else {}
    return {
        "CRONFLEET_DATABASE_URL": address("postgres"),
        **extra,
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
    if args.shards is not None:
        if args.shards < 1:
            raise StackError(f"--shards: {args.shards} is not a count of clusters (1 or more)")
        save_state(shards=args.shards)
    for name in _selected(args):
        for each in services(name):
            each.up()
    tighten(home)  # what a tool copied keeping its own modes (Maven's jars: 0644)
    settings = connection_settings()
    write_stack_env(settings)
    print(f"  stack: settings written to {stack_env_file()}", file=sys.stderr)
    for key, value in settings.items():
        print(f"{key}={value}")
    return 0


def down(args: argparse.Namespace) -> int:
    # reverse order: the broker first, the database last; every shard cluster on disk,
    # also one a later `up --shards` no longer counts
    for name in reversed(tuple(_selected(args))):
        for each in services(name, on_disk=True):
            each.down()
    return 0


def status(args: argparse.Namespace) -> int:
    all_answer = True
    for name in _selected(args):
        if name == "postgres":  # the URL carries the password
            from sqlalchemy.engine import make_url

            from kit.stack.postgres import Postgres

            for cluster in (Postgres.shard(n) for n in range(shard_count())):
                answers = cluster.answers()
                all_answer &= answers
                shown = make_url(cluster.url()).render_as_string(hide_password=True)
                print(f"{cluster.name:<15} {shown:<70} {'answers' if answers else 'DOWN'}")
            continue
        answers = services(name)[0].answers()
        all_answer &= answers
        print(f"{name:<15} {address(name):<70} {'answers' if answers else 'DOWN'}")
        if name == "kafka":
            from kit.stack.kafka.broker import Broker
            from kit.stack.process import port_answers

            broker = Broker.default()
            tls = port_answers(broker.tls_port)
            all_answer &= tls
            shown = f"{broker.tls_bootstrap()} (CA {broker.ca_file})"
            print(f"{'kafka-tls':<15} {shown:<70} {'answers' if tls else 'DOWN'}")
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
        if name == "up":
            action.add_argument(
                "--shards",
                type=int,
                default=None,
                metavar="N",
                help="run N PostgreSQL clusters, the home shard and N-1 more (remembered; "
                "default: the last --shards, else 1)",
            )
        action.set_defaults(func=_guarded(func))
