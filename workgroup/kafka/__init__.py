"""The Kafka group protocol's vocabulary, shared by the member and the coordinator.

Nothing here does I/O or knows either side: ``messages`` holds the
version-independent request and result records; ``java`` the JVM behaviour
(``String.hashCode``, ``HashMap`` order) some of Kafka's choices depend on.
Error codes are :class:`workgroup.errors.ErrorCode`; resources are
:mod:`workgroup.types`.
"""
