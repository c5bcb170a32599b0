"""ctypes binding of libsmolvm-guest.so (include/smolvm/guest.h).

The fork steps, smolvmMarkFrozen and the lease calls are bound; the library is found in
this order: $SMOLVM_GUEST_LIB (a path), the loader's search (inside a machine
LD_LIBRARY_PATH holds /run/smolvm/lib), then next to this package (a build's
shim/ directory, which holds python/ beside libsmolvm-guest.so, or a source
tree's build/shim).
"""

import ctypes
import os

_SONAME = "libsmolvm-guest.so"
_lib = None


class Order(ctypes.Structure):
    """struct smolvm_fork_order."""

    _fields_ = [
        ("index", ctypes.c_int),
        ("name", ctypes.c_char * 64),
        ("share", ctypes.c_char * 8),
        ("token", ctypes.c_char * 256),
    ]


def _candidates():
    env = os.environ.get("SMOLVM_GUEST_LIB")
    if env:
        yield env
        return
    yield _SONAME
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "..", "..", _SONAME)  # <build>/shim/python/smolvm
    yield os.path.join(here, "..", "..", "lib", _SONAME)  # /run/smolvm/python/smolvm
    yield os.path.join(here, "..", "..", "build", "shim", _SONAME)  # <repo>/python/smolvm


def load():
    """The library, loaded once; OSError naming where it looked when absent."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)  # CDLL: calls release the GIL (the wait blocks)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        _bind(lib)
        _lib = lib
        return lib
    raise OSError("libsmolvm-guest.so not found; set SMOLVM_GUEST_LIB or run inside a smolvm machine. Tried: "
                  + "; ".join(tried))


def _bind(lib):
    p = ctypes.POINTER(Order)
    lib.smolvm_fork_order_size.restype = ctypes.c_size_t
    lib.smolvm_fork_order_size.argtypes = []
    for name in ("smolvm_fork_wait", "smolvm_fork_prepare", "smolvm_fork_child", "smolvm_fork_child_attach"):
        getattr(lib, name).restype = ctypes.c_int
        getattr(lib, name).argtypes = [p]
    lib.smolvm_fork_child_park.restype = ctypes.c_int
    lib.smolvm_fork_child_park.argtypes = []
    lib.smolvm_fork_parent.restype = ctypes.c_int
    lib.smolvm_fork_parent.argtypes = [p, ctypes.c_int]
    lib.smolvmForkpoint.restype = ctypes.c_int
    lib.smolvmForkpoint.argtypes = []
    lib.smolvmMarkFrozen.restype = ctypes.c_int
    lib.smolvmMarkFrozen.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    out = [ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(ctypes.c_size_t)]
    for name in ("smolvmLeasePayload", "smolvmNextPayload"):
        getattr(lib, name).restype = ctypes.c_int
        getattr(lib, name).argtypes = out
    for name in ("smolvmReply", "smolvmComplete"):
        getattr(lib, name).restype = ctypes.c_int
        getattr(lib, name).argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.smolvmLeaseFree.restype = None
    lib.smolvmLeaseFree.argtypes = [ctypes.POINTER(ctypes.c_char)]
    if lib.smolvm_fork_order_size() != ctypes.sizeof(Order):
        raise OSError("libsmolvm-guest.so's struct smolvm_fork_order is %d bytes, this package's %d: "
                      "use the package built with the library" % (lib.smolvm_fork_order_size(),
                                                                   ctypes.sizeof(Order)))


def c_environ():
    """The process's C environment (libc's environ) as a dict of str."""
    libc = ctypes.CDLL(None)
    env = ctypes.POINTER(ctypes.c_char_p).in_dll(libc, "environ")
    out = {}
    i = 0
    while env[i] is not None:
        key, sep, value = env[i].partition(b"=")
        if sep:
            out[os.fsdecode(key)] = os.fsdecode(value)
        i += 1
    return out
