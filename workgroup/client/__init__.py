"""The one way every outside reader reaches a group: the CLI, the console, the
directory (``whois``), the portable fence and the drain requests.

One module per concern:

* ``bootstrap`` — :func:`parse_bootstrap`, bootstrap addresses (no heavy imports);
* ``security`` — :class:`Security`, TLS and SASL settings (``without_secrets()``);
* ``errors`` — a coordinator that cannot be reached;
* ``blocking`` — one blocking connection (plain sockets, no event loop: the fence);
* ``connection`` — one asyncio connection per coordinator, reused across requests;
* ``describe`` — DescribeGroups decoded (:class:`GroupDescription`);
* ``slots`` — the lease slots read back from an OffsetFetch (:class:`LeaseSlot`);
* ``owners`` — who owns a resource: the one rule (a resource two assignments name);
* ``reader`` — :class:`GroupReader`, a group's :class:`GroupSnapshot`, read incrementally.

Importing this package loads nothing: import the module you need (the fence
imports ``blocking`` and ``describe`` without asyncio's side of the layer).
"""
