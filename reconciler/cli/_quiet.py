"""Third-party warnings and log lines kept out of npuctl's output.

A library's deprecation warning (asyncssh importing cryptography's DSA types prints six lines on every
SFTP command) or its INFO/WARNING log lines say nothing about the user's specs; npuctl's own output is
what a reader and a CI log parser read. The libraries are named once here and silenced at the CLI
boundary, before any command imports them; NPUCTL_DEBUG=1 keeps everything.
"""

from __future__ import annotations

import logging
import os
import warnings

LIBRARIES = (
    "asyncssh",
    "paramiko",
    "cryptography",
    "fsspec",
    "s3fs",
    "gcsfs",
    "botocore",
    "aiobotocore",
    "urllib3",
)
"""Packages whose warnings and log lines below ERROR npuctl does not show."""


def quiet_third_party() -> None:
    """Ignore the named libraries' warnings (by the module they are attributed to, and cryptography's
    deprecation category wherever it is raised) and raise their loggers to ERROR."""
    if os.environ.get("NPUCTL_DEBUG"):
        return
    pattern = r"(" + "|".join(LIBRARIES) + r")(\..*)?$"
    warnings.filterwarnings("ignore", module=pattern)
    warnings.filterwarnings("ignore", message=r".*(DSA|TripleDES|Blowfish|CAST5).* is deprecated")
    for name in LIBRARIES:
        logging.getLogger(name).setLevel(logging.ERROR)
