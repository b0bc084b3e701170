"""Version-independent records of the Kafka group protocol's requests and results.

Both sides speak them: the coordinator's wire layer
(``workgroup.coordinator.wire``) decodes any supported version of a request into
one of these records and encodes a result back into the version the client asked
for, and its sans-I/O core (``workgroup.coordinator.coordinator``) only sees
records; the member's state machine emits request records and reads result
records, which its wire layer (``workgroup.member.wire``) turns into kio
structures.  Neither side owns this module, so neither depends on the other.

Fields a version does not carry take the value Kafka's own broker assumes for
that version (e.g. ``rebalance_timeout_ms`` = ``session_timeout_ms`` for
JoinGroup v0).  ``api_version`` is kept where Kafka's rules depend on it.

New fields must have defaults so that every producer of these records keeps
working.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workgroup.errors import ErrorCode

#: The client id of :class:`workgroup.fence.Fence` requests.  The embedded
#: coordinator does not count them as the member's heartbeats (its rules).
FENCE_CLIENT_ID = "workgroup.fence"

# --- requests ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """Who sent a request (shown by DescribeGroups)."""

    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class JoinGroup:
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    group_instance_id: str | None = None
    reason: str | None = None
    api_version: int = 9
    client: ClientInfo = field(default_factory=ClientInfo)

    @property
    def requires_known_member_id(self) -> bool:
        """JoinGroup v4+ (KIP-394): a new dynamic member must first get an id."""
        return self.api_version >= 4


@dataclass(frozen=True, slots=True)
class SyncGroup:
    group_id: str
    generation_id: int
    member_id: str
    assignments: tuple[tuple[str, bytes], ...] = ()
    group_instance_id: str | None = None
    protocol_type: str | None = None  # v5+
    protocol_name: str | None = None  # v5+
    api_version: int = 5


@dataclass(frozen=True, slots=True)
class Heartbeat:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    api_version: int = 4
    #: Who sent it: only a fence's client id matters (it extends no session);
    #: the fast decoder leaves it empty, so it takes no part in equality.
    client: ClientInfo = field(default_factory=ClientInfo, compare=False)


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroup:
    group_id: str
    members: tuple[LeavingMember, ...]
    api_version: int = 5


@dataclass(frozen=True, slots=True)
class CommitPartition:
    partition: int
    offset: int
    metadata: str | None = None
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class CommitTopic:
    name: str
    partitions: tuple[CommitPartition, ...]


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    group_id: str
    generation_id: int  # -1: a commit from outside the group (simple consumer / admin)
    member_id: str
    topics: tuple[CommitTopic, ...]
    group_instance_id: str | None = None
    retention_time_ms: int = -1
    api_version: int = 8
    #: Who sent it (a fence's commit extends no session); not part of equality.
    client: ClientInfo = field(default_factory=ClientInfo, compare=False)


@dataclass(frozen=True, slots=True)
class FetchTopic:
    name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class OffsetFetchGroup:
    group_id: str
    topics: tuple[FetchTopic, ...] | None  # None: every committed offset of the group


@dataclass(frozen=True, slots=True)
class OffsetFetch:
    groups: tuple[OffsetFetchGroup, ...]
    require_stable: bool = False
    api_version: int = 8


@dataclass(frozen=True, slots=True)
class DescribeGroups:
    group_ids: tuple[str, ...]
    api_version: int = 5


@dataclass(frozen=True, slots=True)
class ListGroups:
    states_filter: tuple[str, ...] = ()
    types_filter: tuple[str, ...] = ()
    api_version: int = 4


@dataclass(frozen=True, slots=True)
class DeleteGroups:
    group_ids: tuple[str, ...]
    api_version: int = 2


GroupRequest = (
    JoinGroup
    | SyncGroup
    | Heartbeat
    | LeaveGroup
    | OffsetCommit
    | OffsetFetch
    | DescribeGroups
    | ListGroups
    | DeleteGroups
)

# --- results ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    error: ErrorCode
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[JoinedMember, ...] = ()  # only the leader receives them
    skip_assignment: bool = False  # KIP-814, v9+


@dataclass(frozen=True, slots=True)
class SyncGroupResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeftMember:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveGroupResult:
    error: ErrorCode
    members: tuple[LeftMember, ...] = ()


@dataclass(frozen=True, slots=True)
class CommitPartitionResult:
    partition: int
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class CommitTopicResult:
    name: str
    partitions: tuple[CommitPartitionResult, ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitResult:
    topics: tuple[CommitTopicResult, ...]


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    partition: int
    offset: int  # -1: nothing committed
    metadata: str | None = ""
    leader_epoch: int = -1
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class FetchedTopic:
    name: str
    partitions: tuple[FetchedPartition, ...]


@dataclass(frozen=True, slots=True)
class FetchedGroup:
    group_id: str
    topics: tuple[FetchedTopic, ...]
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class OffsetFetchResult:
    groups: tuple[FetchedGroup, ...]


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    error: ErrorCode
    group_id: str
    state: str  # "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"
    protocol_type: str = ""
    protocol_data: str = ""  # the chosen protocol name while Stable / CompletingRebalance
    members: tuple[DescribedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeGroupsResult:
    groups: tuple[DescribedGroup, ...]


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class ListGroupsResult:
    error: ErrorCode
    groups: tuple[ListedGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class DeletedGroup:
    group_id: str
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class DeleteGroupsResult:
    groups: tuple[DeletedGroup, ...]


GroupResult = (
    JoinGroupResult
    | SyncGroupResult
    | HeartbeatResult
    | LeaveGroupResult
    | OffsetCommitResult
    | OffsetFetchResult
    | DescribeGroupsResult
    | ListGroupsResult
    | DeleteGroupsResult
)
