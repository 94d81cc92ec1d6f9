"""Mutated requests of every advertised API and version against a real coordinator
process under an address-space limit (issue 23: "one frame kills the process").

For a fixed budget (`KGROUPS_FUZZ_SECONDS`, 25 s in `make test`; `make fuzz` runs ten
minutes), seeded (`KGROUPS_FUZZ_SEED`), well-formed requests of random APIs and versions
are mutated where parsers trust their input (`fuzzing.py`) and sent, each on its own
connection (sometimes behind a valid one), to the PLAINTEXT listener and, pre-auth, to a
SASL listener. Meanwhile a member of another group heartbeats every 50 ms. Required:
the process never dies, the victim keeps its generation with a heartbeat p99 under
1 s (the fuzzer runs beside the other tests, whose Spark and Kafka JVMs share the
machine's two cores; the 500 ms bound under attack is test_abuse's and test_hostile's,
measured alone), the log has no traceback, and memory stays bounded.

On main before issue 23 the process died within the first seconds: a DescribeGroups (or
any array) whose count claims two billion elements made kio reserve 16 GiB and abort.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import time
from collections import Counter, deque
from pathlib import Path

from tests.integration.fuzzing import mutate, valid_request
from tests.integration.harness import Coordinator
from tests.integration.probe import HeartbeatProbe

SECONDS = float(os.environ.get("KGROUPS_FUZZ_SECONDS", "25"))
SEED = int(os.environ.get("KGROUPS_FUZZ_SEED", "23"))
ADDRESS_SPACE = 1536 * 1024 * 1024
"""1.5 GiB: room for the coordinator (about 160 MB of address space idle), none for a
reservation sized by a count from the wire."""
WORKERS = 8
ANSWER_WAIT_S = 0.25


async def _send(port: int, frames: list[bytes], outcomes: Counter[str]) -> None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        outcomes["refused"] += 1
        return
    try:
        writer.write(b"".join(frames))
        await writer.drain()
        data = await asyncio.wait_for(reader.read(65536), ANSWER_WAIT_S)
        outcomes["closed" if not data else "answered"] += 1
    except TimeoutError:
        outcomes["open"] += 1  # parked (a JoinGroup, a Fetch long-poll): we hang up
    except (ConnectionError, OSError):
        outcomes["closed"] += 1
    finally:
        writer.close()


async def _fuzz(ports: dict[str, int], seconds: float, seed: int,
                recent: deque[bytes]) -> Counter[str]:  # fmt: skip
    rng = random.Random(seed)
    outcomes: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    queue: asyncio.Queue[tuple[int, list[bytes]] | None] = asyncio.Queue(maxsize=WORKERS * 2)

    async def worker() -> None:
        while (item := await queue.get()) is not None:
            await _send(item[0], item[1], outcomes)

    workers = [asyncio.create_task(worker()) for _ in range(WORKERS)]
    n = 0
    while time.monotonic() < deadline:
        n += 1
        request = valid_request(rng, n)
        frames = [mutate(request, rng)] if rng.random() < 0.9 else [request.frame()]
        if rng.random() < 0.2:  # pipelined behind a valid request
            frames.insert(0, valid_request(rng, n + 10**6).frame())
        port = ports["SASL_PLAINTEXT"] if rng.random() < 0.15 else ports["PLAINTEXT"]
        recent.extend(frames)
        await queue.put((port, frames))
        outcomes["frames"] += len(frames)
    for _ in workers:
        await queue.put(None)
    await asyncio.gather(*workers)
    return outcomes


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024  # type: ignore[union-attr]


def test_mutated_requests_never_take_the_coordinator_down(tmp_path: Path) -> None:
    users = tmp_path / "users.yaml"
    users.write_text("users:\n  alice:\n    password: alice-pw\n")
    coord = Coordinator(
        tmp_path / "data", "--initial-rebalance-delay-ms", "0", "--min-session-timeout-ms", "1000",
        "--sasl-mechanisms", "PLAIN,SCRAM-SHA-256",
        "--credentials", str(users), "--log-level", "INFO",
        listeners=("PLAINTEXT", "SASL_PLAINTEXT"), address_space=ADDRESS_SPACE,
    )  # fmt: skip
    coord.start()
    recent: deque[bytes] = deque(maxlen=50)
    probe = HeartbeatProbe("127.0.0.1", coord.port)
    try:
        start = time.monotonic()
        outcomes = asyncio.run(_fuzz(coord.ports, SECONDS, SEED, recent))
        end = time.monotonic()
        assert coord.proc is not None
        if coord.proc.poll() is not None:
            last = "\n".join(f.hex() for f in list(recent)[-10:])
            raise AssertionError(
                f"the coordinator died (exit {coord.proc.returncode}) after {outcomes}; "
                f"seed {SEED}; the last frames sent:\n{last}\nlog:\n{coord.log()[-3000:]}"
            )
        probe.assert_served(start, end, p99_s=1.0)
        assert outcomes["frames"] >= SECONDS * 20, outcomes
        assert outcomes["closed"] > outcomes["frames"] // 4, outcomes  # malformed: hung up on
        assert outcomes["answered"] > 0, outcomes
        assert rss_mib(coord.proc.pid) < 400, f"{rss_mib(coord.proc.pid):.0f} MiB resident"
        log = coord.log()
        for bad in ("Traceback", "CRITICAL", "Task exception was never retrieved"):
            assert bad not in log, log[log.index(bad) - 2000 : log.index(bad) + 2000]
    finally:
        probe.stop()
        coord.kill()
