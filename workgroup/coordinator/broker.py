"""Broker-level requests the embedded coordinator answers by itself.

A Kafka client talks to a *broker* before it talks to a group coordinator: it
asks which API versions the broker speaks (ApiVersions), which brokers form the
cluster (Metadata) and which broker coordinates its group (FindCoordinator).
The embedded coordinator is a one-broker cluster without topics, so these
answers depend only on its own address; no group state is involved and the
group core never sees these requests.  SaslHandshake and SaslAuthenticate
are broker-level too; their answers depend on the connection's state
(sasl.py) and the server gives them.

Rules (as Apache Kafka's broker, minus everything about topics):

* Metadata lists this process as the only broker and controller.  A request
  for all topics gets an empty list.  A requested topic is reported as existing
  with no partitions (``empty_topics``, the default): librdkafka consumers only
  send JoinGroup once a subscribed topic exists, and so they form groups (with
  empty assignments) on the embedded coordinator.  Without ``empty_topics`` a
  requested topic gets UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers a topic
  that does not exist when auto-creation is off.
* FindCoordinator names this process for every group key (key type 0, the only
  type in v0).  Transactions are not supported: a transaction key gets
  COORDINATOR_NOT_AVAILABLE with a message saying so.  Any other key type gets
  INVALID_REQUEST, as Kafka answers an unknown key type.
"""

from __future__ import annotations

from workgroup.errors import ErrorCode

# The records live in ``workgroup.kafka.messages`` (one codec speaks them on both
# sides); this module re-exports them beside the answers it gives.
from workgroup.kafka.messages import (
    ApiVersionRange,
    ApiVersions,
    ApiVersionsResult,
    BrokerAddress,
    BrokerRequest,
    BrokerResult,
    CoordinatorAnswer,
    FindCoordinator,
    FindCoordinatorResult,
    Metadata,
    MetadataResult,
    MetadataTopic,
    SaslAuthenticate,
    SaslAuthenticateResult,
    SaslHandshake,
    SaslHandshakeResult,
)

#: Key types of FindCoordinator (KIP-98 added transactions; KIP-932 share groups).
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1

CLUSTER_ID = "workgroup-embedded"

# --- answers ----------------------------------------------------------------


def answer_metadata(
    request: Metadata, me: BrokerAddress, *, empty_topics: bool = False
) -> MetadataResult:
    error = ErrorCode.NONE if empty_topics else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    topics = tuple(MetadataTopic(name, error) for name in request.topics or ())
    return MetadataResult(
        brokers=(me,), controller_id=me.node_id, cluster_id=CLUSTER_ID, topics=topics
    )


def answer_find_coordinator(request: FindCoordinator, me: BrokerAddress) -> FindCoordinatorResult:
    answers = []
    for key in request.keys:
        if request.key_type == KEY_TYPE_GROUP:
            answers.append(CoordinatorAnswer(key, ErrorCode.NONE, me.node_id, me.host, me.port))
        elif request.key_type == KEY_TYPE_TRANSACTION:
            answers.append(
                CoordinatorAnswer(
                    key,
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    error_message="the embedded coordinator does not coordinate transactions",
                )
            )
        else:
            answers.append(
                CoordinatorAnswer(
                    key,
                    ErrorCode.INVALID_REQUEST,
                    error_message=f"unknown coordinator key type {request.key_type}",
                )
            )
    return FindCoordinatorResult(tuple(answers))


__all__ = [
    "CLUSTER_ID",
    "KEY_TYPE_GROUP",
    "KEY_TYPE_TRANSACTION",
    "ApiVersionRange",
    "ApiVersions",
    "ApiVersionsResult",
    "BrokerAddress",
    "BrokerRequest",
    "BrokerResult",
    "CoordinatorAnswer",
    "FindCoordinator",
    "FindCoordinatorResult",
    "Metadata",
    "MetadataResult",
    "MetadataTopic",
    "SaslAuthenticate",
    "SaslAuthenticateResult",
    "SaslHandshake",
    "SaslHandshakeResult",
    "answer_find_coordinator",
    "answer_metadata",
]
