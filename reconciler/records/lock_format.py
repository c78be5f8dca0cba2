"""The lock file's format version, apart from the lock's model so that reading and writing a lock file
(reconciler.state.lockfile) does not load pydantic."""

from __future__ import annotations

from typing import Literal

LockFormat = Literal[2]
FORMAT_VERSION: LockFormat = 2
"""The lock file format: bump it when a reader of the previous format would misread a file in this one."""
