"""Which generation of the group this member belongs to (Kafka's
``AbstractCoordinator.Generation``).

Rules:

1. A :class:`Generation` is the coordinator's answer to a JoinGroup: its id,
   the member id it gave, and the protocol it chose.  It never changes in
   place; the member replaces it.
2. :data:`NO_GENERATION` is a member before its first JoinGroup or after
   UNKNOWN_MEMBER_ID; :meth:`Generation.reset` (ILLEGAL_GENERATION, a lost
   session) keeps the member id so that the coordinator recognises the member
   when it rejoins.
3. Every request is sent under a generation; its answer counts only if the
   member is still in that generation with that member id
   (:meth:`Generation.answers_to`), otherwise it is stale.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from workgroup.protocol.protocol import Protocol
from workgroup.types import NO_GENERATION_ID


@dataclass(frozen=True, slots=True)
class Generation:
    generation_id: int
    member_id: str
    #: The protocol the coordinator chose for this generation.
    protocol: Protocol | None

    @property
    def is_valid(self) -> bool:
        return self.generation_id != NO_GENERATION_ID

    def with_member_id(self, member_id: str) -> Generation:
        """The member id the coordinator handed out (MEMBER_ID_REQUIRED)."""
        return replace(self, member_id=member_id)

    def reset(self) -> Generation:
        """No generation, same member id (rule 2)."""
        return Generation(NO_GENERATION_ID, self.member_id, None)

    def answers_to(self, sent_under: Generation) -> bool:
        """Whether an answer to a request sent under ``sent_under`` still counts (rule 3)."""
        return (
            sent_under.generation_id == self.generation_id
            and sent_under.member_id == self.member_id
        )


NO_GENERATION = Generation(NO_GENERATION_ID, "", None)

__all__ = ["NO_GENERATION", "NO_GENERATION_ID", "Generation"]
