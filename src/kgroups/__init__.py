"""kgroups: Kafka-style consumer groups for anything that runs on Kubernetes."""

__version__ = "0.1.0"
