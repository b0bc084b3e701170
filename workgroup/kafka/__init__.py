"""The Kafka protocol's vocabulary and codec, shared by the member and the coordinator.

Nothing here does I/O or knows either side:

* ``messages``: the version-independent request and result records;
* ``apis``: the one table of the APIs workgroup speaks (key, versions on each
  side, first flexible version, codec) and kio's schemas for them;
* ``codec``: for each API, records to kio's entities and back (requests and
  results, both ways);
* ``adapter``: ``KafkaRequest``, a record in the shape aiokafka's connections
  send (it does not import aiokafka);
* ``java``: the JVM behaviour (``String.hashCode``, ``HashMap`` order) some of
  Kafka's choices depend on;
* ``kio_loading``: kio is loaded first, without hypothesis (no ``.hypothesis``
  directory left in the current directory).

Error codes are :class:`workgroup.errors.ErrorCode`; resources are
:mod:`workgroup.types`.
"""

from workgroup.kafka.kio_loading import load_kio

load_kio()
