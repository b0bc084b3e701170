"""The Kafka group protocol's vocabulary, shared by the member and the coordinator.

Nothing here does I/O or knows either side: ``messages`` holds the
version-independent request and result records.  Error codes are
:class:`workgroup.errors.ErrorCode`; resources are :mod:`workgroup.types`.
"""
