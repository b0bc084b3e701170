"""Back-ends for the interop suite: the embedded coordinator and Tansu.

Every check runs against both. A back-end is started once per test module on a
free loopback port and stopped after it; tests use fresh group ids so they do
not see each other's groups.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from workgroup.testing import servers

from .wire import ENCODERS, GroupWire, KafkaPythonWire

BACKENDS = ["embedded", pytest.param("tansu", marks=pytest.mark.tansu)]

#: Session timeout the tests give their members. Tansu holds every JoinGroup for
#: about half the first member's session timeout, so it must stay short there.
SESSION_TIMEOUT_MS = {"embedded": 3000, "tansu": 2000}

#: The embedded coordinator runs with a low minimum session timeout so that
#: session expiry can be tested in a second rather than in Kafka's six.
EMBEDDED_MIN_SESSION_TIMEOUT_MS = 500

STARTUP_TIMEOUT_S = 15.0


@contextlib.contextmanager
def run_tansu() -> Iterator[tuple[str, int]]:
    with servers.run_tansu(startup_timeout_s=STARTUP_TIMEOUT_S) as tansu:
        yield tansu.host, tansu.port


@contextlib.contextmanager
def run_embedded(*extra_args: str) -> Iterator[tuple[str, int]]:
    """``workgroup coordinator --listen 127.0.0.1:0``; the first stdout line names the port.

    Its log goes to a temporary file that is quoted if the process dies early.
    """
    with servers.run_coordinator(
        "--min-session-timeout-ms",
        str(EMBEDDED_MIN_SESSION_TIMEOUT_MS),
        *extra_args,
        startup_timeout_s=STARTUP_TIMEOUT_S,
    ) as coordinator:
        yield coordinator.host, coordinator.port
        coordinator.check_alive()


@dataclass
class Backend:
    """A running broker the checks talk to."""

    name: str
    host: str
    port: int
    topics: set[str] = field(default_factory=set)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def session_timeout_ms(self) -> int:
        return SESSION_TIMEOUT_MS[self.name]

    async def connect(self, encoder: str = "kafka-python") -> GroupWire:
        return await ENCODERS[encoder].connect(self.host, self.port)

    async def ensure_topic(self, name: str, partitions: int = 1) -> None:
        """Create a topic where the back-end keeps topics.

        Tansu, like Kafka, accepts OffsetCommit only for existing topics; the
        embedded coordinator has no topics and accepts commits for any name.
        """
        if self.name == "embedded" or name in self.topics:
            return
        wire = await KafkaPythonWire.connect(self.host, self.port)
        try:
            error = await wire.create_topic(name, partitions)
            assert error in (0, 36), error  # 36: TOPIC_ALREADY_EXISTS
        finally:
            await wire.close()
        self.topics.add(name)


def tansu_deviates(request: pytest.FixtureRequest, backend: Backend, what: str) -> None:
    """Marks this test's Tansu run a strict expected failure; ``what`` says what
    Tansu does instead of Kafka's rule."""
    if backend.name == "tansu":
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"Tansu: {what}"))


@contextlib.contextmanager
def start_backend(name: str, *embedded_args: str) -> Iterator[Backend]:
    runner = run_tansu() if name == "tansu" else run_embedded(*embedded_args)
    with runner as (host, port):
        yield Backend(name, host, port)


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """A back-end per test module; a module may set ``EMBEDDED_COORDINATOR_ARGS``."""
    extra_args = getattr(request.module, "EMBEDDED_COORDINATOR_ARGS", ())
    with start_backend(request.param, *extra_args) as running:
        yield running


@pytest.fixture
def group_id(request: pytest.FixtureRequest) -> str:
    return f"{request.node.originalname}-{uuid.uuid4().hex[:8]}"


Connect = Callable[..., Awaitable[GroupWire]]


@pytest.fixture
async def connect(backend: Backend) -> AsyncIterator[Connect]:
    """Opens connections to the back-end and closes them all after the test."""
    opened: list[GroupWire] = []

    async def _connect(encoder: str = "kafka-python", on: Backend | None = None) -> GroupWire:
        wire = await (on or backend).connect(encoder)
        opened.append(wire)
        return wire

    yield _connect
    for wire in opened:
        await wire.close()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow_on_tansu: slow (over 5 s) against Tansu only; marked slow there"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks ``slow_on_tansu`` tests slow on Tansu, and runs the aiokafka encoder
    against Tansu only when asked to.

    Through both encoders Tansu gave the same outcome for every check, and each of
    its JoinGroups is held ~1 s, so repeating them would double Tansu's minute.
    Set INTEROP_TANSU_ALL_ENCODERS=1 to repeat them anyway.
    """
    all_encoders = os.environ.get("INTEROP_TANSU_ALL_ENCODERS") == "1"
    here = Path(__file__).parent
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        on_tansu = here in item.path.parents and params.get("backend") == "tansu"
        if on_tansu and item.get_closest_marker("slow_on_tansu") is not None:
            item.add_marker(pytest.mark.slow)
        if on_tansu and params.get("encoder") == "aiokafka" and not all_encoders:
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
