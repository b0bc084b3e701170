"""A portable fence over SASL and TLS: credentials stay out of the pickle unless
asked for; the process that uses a fence finds its password in its environment
or a file; a missing one is a clear error."""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
from collections.abc import AsyncIterator
from pathlib import Path

import cloudpickle
import pytest

from workgroup.coordinator.sasl import SaslSettings
from workgroup.coordinator.scram import Credentials, verifiers
from workgroup.coordinator.server import CoordinatorServer
from workgroup.coordinator.tls import TlsSettings
from workgroup.errors import AuthenticationError
from workgroup.fence import PASSWORD_ENV, PASSWORD_FILE_ENV, Fence, _close_pool
from workgroup.member.driver import GroupMember
from workgroup.runtime.batched_slots import MemberSlotStore
from workgroup.runtime.errors import LeaseLostError
from workgroup.runtime.lease import Lease
from workgroup.runtime.slots import slot_of
from workgroup.security import Security

from .conftest import Pki, member

pytestmark = pytest.mark.timeout(60)

PASSWORD = "alice-Fence-Secret-1"


@pytest.fixture
async def server() -> AsyncIterator[CoordinatorServer]:
    credentials = Credentials({"alice": verifiers(PASSWORD, iterations=4096)})
    async with CoordinatorServer(sasl=SaslSettings(credentials)) as server:
        yield server


async def held_lease(m: GroupMember, group: str) -> Lease:
    await asyncio.wait_for(m.wait_stable(), 20)
    lease = Lease(group, "shard", 0, slot=slot_of(group, 0), store=MemberSlotStore(m))
    await lease.acquire()
    return lease


def commit_in_child(fence_bytes: bytes) -> str:
    fence = pickle.loads(fence_bytes)
    try:
        fence.commit("from a child")
    except (AuthenticationError, LeaseLostError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return "committed"


def in_spawned_child(fence: Fence) -> str:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(commit_in_child, (pickle.dumps(fence),))


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
async def test_a_pickled_fence_holds_no_password_and_the_user_process_supplies_it(
    server: CoordinatorServer,
    mechanism: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    security = Security("SASL_PLAINTEXT", mechanism, "alice", PASSWORD)
    group = f"fenced-{mechanism.lower()}"
    async with member(server, security, group) as m:
        lease = await held_lease(m, group)
        fence = lease.fence()
        for pickled in (pickle.dumps(fence), cloudpickle.dumps(fence)):
            assert PASSWORD.encode() not in pickled
        assert PASSWORD not in repr(fence)
        assert fence.security.sasl_password is None

        # No password in this process: a one-line error that says where to put it.
        monkeypatch.delenv(PASSWORD_ENV, raising=False)
        monkeypatch.delenv(PASSWORD_FILE_ENV, raising=False)
        _close_pool()
        with pytest.raises(AuthenticationError, match=PASSWORD_ENV) as caught:
            await asyncio.to_thread(fence.commit, "no password")
        assert "\n" not in str(caught.value)

        # From the environment, in a spawned process (it inherits the variable).
        monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
        assert await asyncio.to_thread(in_spawned_child, fence) == "committed"
        assert await lease.checkpoint() == "from a child"

        # From a file.
        monkeypatch.delenv(PASSWORD_ENV)
        secret = tmp_path / "password"
        secret.write_text(PASSWORD + "\n")
        monkeypatch.setenv(PASSWORD_FILE_ENV, str(secret))
        _close_pool()
        await asyncio.to_thread(fence.commit, "password from a file")
        assert await lease.checkpoint() == "password from a file"

        # A wrong one is refused by the coordinator.
        monkeypatch.setenv(PASSWORD_ENV, "not-the-password")
        _close_pool()
        with pytest.raises(AuthenticationError, match="refused the credentials"):
            await asyncio.to_thread(fence.commit, "wrong password")

        # Asked for, the password travels in the fence.
        monkeypatch.delenv(PASSWORD_ENV)
        monkeypatch.delenv(PASSWORD_FILE_ENV)
        _close_pool()
        with_secret = lease.fence(include_secrets=True)
        assert PASSWORD.encode() in pickle.dumps(with_secret)
        assert PASSWORD not in repr(with_secret)
        assert await asyncio.to_thread(in_spawned_child, with_secret) == "committed"


async def test_a_fence_speaks_tls(pki: Pki) -> None:
    tls = TlsSettings(certfile=str(pki.cert), keyfile=str(pki.key))
    async with CoordinatorServer(tls=tls) as server:
        security = Security("SSL", ssl_cafile=str(pki.ca))
        async with member(server, security, "tls-fenced") as m:
            lease = await held_lease(m, "tls-fenced")
            fence = lease.fence()
            assert fence.security.protocol == "SSL"
            assert fence.security.ssl_cafile == str(pki.ca)
            await asyncio.to_thread(fence.commit, "over tls")
            await asyncio.to_thread(fence.check)
            assert await lease.checkpoint() == "over tls"
