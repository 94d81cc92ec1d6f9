"""What the example members of examples/k8s/apps share whatever their client library: the
same arguments (from the command line or the pod's environment) and the same report, one
JSON line whenever what the member owns changes, which tests/cluster reads from pod logs.
Imported from beside them (Python puts a program's own directory on its path)."""

from __future__ import annotations

import argparse
import json
import os
import socket
from collections.abc import Iterable
from typing import Any


def arguments(description: str, argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    for flags, name in ((("--bootstrap-server", "--bootstrap"), "bootstrap"),
                        (("--group",), "group"), (("--topic",), "topic")):  # fmt: skip
        value = os.environ.get(f"KGROUPS_{name.upper()}")
        parser.add_argument(*flags, dest=name, default=value, required=value is None)
    parser.add_argument("--client-id", default=socket.gethostname())
    parser.add_argument("--session-timeout-ms", type=int, default=4000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--metadata-max-age-ms", type=int, default=2000)
    parser.add_argument("--commit-interval-ms", type=int, default=5000)
    return parser.parse_args(argv)


class Report:
    """Prints what the member owns as one JSON line whenever that changes (starting from
    nothing: generation null, nothing assigned)."""

    def __init__(self, client: str, name: str) -> None:
        self.client, self.name = client, name
        self.last = self.line(None, [])

    def line(self, generation: int | None, owned: Iterable[Any]) -> str:
        assigned = sorted([tp.topic, tp.partition] for tp in owned)
        return json.dumps(
            {
                "client": self.client,
                "name": self.name,
                "generation": generation,
                "assigned": assigned,
            }
        )

    def __call__(self, generation: int | None, owned: Iterable[Any]) -> None:
        line = self.line(generation, owned)
        if line != self.last:
            print(line, flush=True)
            self.last = line
