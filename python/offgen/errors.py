"""The exceptions offgen raises: one class per category of the C++ offgen::Error.

Every message is the one the ``offgen`` command prints for the same failure.
"""

from __future__ import annotations


class Error(Exception):
    """Base class of every offgen error."""


class ConfigError(Error, ValueError):
    """A bad option: policy, engine or sampling values, a policy file (the CLI exits 2)."""


class InputError(Error, ValueError):
    """Bad input: a malformed model file, an invalid request, a prompt too long for the window."""


class ResourceError(Error):
    """Something does not fit: memory, tier capacities, disk space."""


class IoError(Error, OSError):
    """A file or device could not be read or written."""


class InternalError(Error, RuntimeError):
    """A broken invariant inside offgen (a bug: please report it)."""


def _for_kind(kind: str) -> type[Error]:
    """The class of a request's error record kind (see scheduler/job_io.h): a request whose KV
    cache does not fit the tier capacities is a resource matter, every other one the input's."""
    return ResourceError if kind == "does_not_fit" else InputError
