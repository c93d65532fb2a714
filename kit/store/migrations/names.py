"""What autogenerate and the schema test compare: the models, not the day partitions of
`runs` that the maintenance makes and drops at run time (kit/store/run_history.py)."""

from __future__ import annotations

from kit.store.run_history import is_run_partition


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    return not (type_ == "table" and name is not None and is_run_partition(name))
