"""workgroup: hand resources to a pool of Python workers over Kafka's group protocol."""

from workgroup.errors import ErrorCode, WorkgroupError

__version__ = "0.1.0.dev0"

__all__ = ["ErrorCode", "WorkgroupError", "__version__"]
