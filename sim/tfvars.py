"""`cronfleet sim size --emit-tfvars`: the fleet the model recommends, written as the
Terraform variables of terraform/examples/top-of-hour (its sizing.tf declares exactly these;
tests/deploy checks names and types)."""

from __future__ import annotations

import math
from collections.abc import Mapping

# name -> Terraform type, in the order written
SIZING_VARIABLES: dict[str, str] = {
    "scheduler_nodes": "number",
    "scheduler_nodes_headroom": "number",
    "workers": "number",
    "workers_headroom": "number",
    "worker_concurrency": "number",
    "partitions": "number",
    "db_max_connections": "number",
    "kafka_partitions_per_tier": "number",
}


def with_headroom(rec: Mapping[str, int]) -> dict[str, int]:
    """The recommendation plus what survives losing one: one more node, a tenth more workers."""
    return {
        **rec,
        "scheduler_nodes_headroom": 1,
        "workers_headroom": math.ceil(int(rec["workers"]) / 10),
    }


def tfvars_text(rec: Mapping[str, int], header: str) -> str:
    """HCL assignments, one per sizing variable; a missing or extra key is a bug here."""
    if set(rec) != set(SIZING_VARIABLES):
        raise ValueError(f"sizing keys {sorted(rec)} != {sorted(SIZING_VARIABLES)}")
    width = max(map(len, SIZING_VARIABLES))  # aligned as `terraform fmt` aligns them
    lines = [f"# {header}"]
    lines += [f"{name:<{width}} = {int(rec[name])}" for name in SIZING_VARIABLES]
    return "\n".join(lines) + "\n"
