"""The one name for arbitrary JSON: facts, payloads, verdicts and rows as they cross a boundary.

Everything else is typed; a value is ``Json`` only while it has not been read into a
dataclass or a pydantic model yet (or never will be, like a job's free-form metadata).
"""

from typing import Any, TypeAlias

Json: TypeAlias = Any
JsonObject: TypeAlias = dict[str, Json]
