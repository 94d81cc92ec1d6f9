"""The per-tier time summary `make test` ends with.

Each tier (the directory under tests/) is reported with its tests' outcomes, its wall time
(its first test's start to its last test's end) and its busy time (the sum of its tests'
setup, call and teardown). With tiers run one after the other the walls add up to the
run; with workers in parallel, busy beyond wall is what the parallelism saved. Each test
file's busy time goes to .kgroups/test-times.tsv, slowest first: where to look first when
the run grows.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest


@dataclass
class Tier:
    start: float = float("inf")
    stop: float = 0.0
    busy: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)


class TierSummary:
    """A pytest plugin: collects reports, prints the table at the end of the session."""

    def __init__(self, times: Path | None = None) -> None:
        self.tiers: dict[str, Tier] = {}
        self.files: defaultdict[str, float] = defaultdict(float)
        self.ends: dict[str, tuple[float, float]] = {}  # test -> (first start, last stop)
        self.times = times

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        parts = report.nodeid.split("::")[0].split("/")
        name = parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"
        tier = self.tiers.setdefault(name, Tier())
        tier.start = min(tier.start, report.start)
        tier.stop = max(tier.stop, report.stop)
        tier.busy += report.duration
        self.files[report.nodeid.split("::")[0]] += report.duration
        began, ended = self.ends.get(report.nodeid, (report.start, report.stop))
        self.ends[report.nodeid] = (min(began, report.start), max(ended, report.stop))
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            tier.outcomes[report.outcome] += 1
        elif report.when == "teardown" and report.outcome == "failed":
            tier.outcomes["error"] += 1

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.tiers:
            return
        write = terminalreporter.write_line
        terminalreporter.section("time per tier")
        write(f"{'tier':<14}{'wall':>9}{'busy':>9}  outcomes")
        first = min(t.start for t in self.tiers.values())
        last = max(t.stop for t in self.tiers.values())
        for name, tier in sorted(self.tiers.items(), key=lambda kv: kv[1].start):
            outcomes = ", ".join(f"{n} {o}" for o, n in sorted(tier.outcomes.items()))
            write(
                f"{name:<14}{_minutes(tier.stop - tier.start):>9}{_minutes(tier.busy):>9}  {outcomes}"
            )
        busy = sum(t.busy for t in self.tiers.values())
        write(f"{'all':<14}{_minutes(last - first):>9}{_minutes(busy):>9}")
        # What the run waited for at its end: the tests that finished last, from when
        # they started (a long test started late is the one to schedule earlier).
        for name, (began, ended) in sorted(self.ends.items(), key=lambda kv: kv[1][1])[-4:]:
            write(f"ended {_minutes(ended - first)} (from {_minutes(began - first)}): {name}")
        if self.times is not None:
            self.times.parent.mkdir(parents=True, exist_ok=True)
            rows = sorted(self.files.items(), key=lambda kv: -kv[1])
            self.times.write_text("".join(f"{seconds:.1f}\t{name}\n" for name, seconds in rows))


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{seconds % 60:04.1f}s"
