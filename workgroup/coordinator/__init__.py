"""The embedded group coordinator: Kafka's classic group protocol on loopback."""
