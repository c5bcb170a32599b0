"""The clone's end of its lease link (include/smolvm/guest.h, smolvmLeasePayload
and the rest), for smolvm.lease_payload / next_payload / reply / complete."""

import ctypes
import errno
import json
import os

from smolvm import _guest

LEASE_ENDED = 1  # SMOLVM_LEASE_ENDED
MAX_JSON = 1 << 20


class LeaseError(OSError):
    """The lease link failed or is absent (errno in .errno)."""


_WHY = {
    errno.ENOTSUP: "no lease link here: this is no clone of a smolvm machine (or it is a golden)",
    errno.EPIPE: "the lease is over (completed, or the supervisor closed the link after a bad message)",
    errno.EPERM: "the lease link belongs to the process that first used it, not to a fork of it",
    errno.EPROTO: "the supervisor broke the lease protocol",
}


def _error(err, what):
    return LeaseError(err, "smolvm.%s: %s" % (what, _WHY.get(err, os.strerror(err))))


def take(first):
    """The first payload (first=True) or the next one, as a dict; None once
    the lease ended."""
    lib = _guest.load()
    call = lib.smolvmLeasePayload if first else lib.smolvmNextPayload
    buf = ctypes.POINTER(ctypes.c_char)()
    size = ctypes.c_size_t(0)
    r = call(ctypes.byref(buf), ctypes.byref(size))
    if r == LEASE_ENDED:
        return None
    if r < 0:
        raise _error(-r, "lease_payload" if first else "next_payload")
    try:
        text = ctypes.string_at(buf, size.value)
    finally:
        lib.smolvmLeaseFree(buf)
    return json.loads(text.decode("utf-8"))


def send(result, is_complete):
    """Sends `result` (JSON-serializable) as a reply or the lease's result."""
    what = "complete" if is_complete else "reply"
    # allow_nan=False: NaN and Infinity are not JSON, and the supervisor
    # would fail the lease over them; say so here instead.
    data = json.dumps(result, allow_nan=False, separators=(",", ":")).encode("utf-8")
    if len(data) > MAX_JSON:
        raise ValueError("smolvm.%s: the result is %d bytes of JSON, at most %d" % (what, len(data), MAX_JSON))
    lib = _guest.load()
    r = (lib.smolvmComplete if is_complete else lib.smolvmReply)(data, len(data))
    if r < 0:
        raise _error(-r, what)
