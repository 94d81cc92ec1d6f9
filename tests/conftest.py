"""What every tier shares.

librdkafka (confluent-kafka) aborts the whole process when one of its clients is destroyed
from one of its own threads, and Python may do exactly that: a client left in a reference
cycle is destroyed by whichever thread next triggers the garbage collector, possibly a
librdkafka callback thread (confluentinc/confluent-kafka-python#2129). So after each test
of a module that uses confluent-kafka in this process, the garbage is collected here, on
the main thread, and no such client outlives its test.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest


@functools.cache
def _uses_librdkafka(path: str) -> bool:
    try:
        return "confluent_kafka" in Path(path).read_text(errors="replace")
    except OSError:
        return False


@pytest.fixture(autouse=True)
def _librdkafka_clients_die_on_the_main_thread(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if _uses_librdkafka(str(request.path)):
        gc.collect()
