"""The embedded group coordinator: Kafka's classic group protocol on loopback."""

# The wire modules import kio: it is loaded first the package's way (without
# hypothesis, see workgroup.kafka.kio_loading).
import workgroup.kafka  # noqa: F401
