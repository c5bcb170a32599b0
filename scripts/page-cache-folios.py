#!/usr/bin/env python3
# The page cache's folio sizes for the first GiB of each file given (root:
# /proc/self/pagemap and /proc/kpageflags): how the last cold read left it.
# A warm load from 2 MiB folios runs several times faster than from 4 KiB ones
# (docs/machines.md, "Reading speed"). Pages not cached before are left out.
# Usage: scripts/page-cache-folios.py FILE...   (one JSON line per file)
import collections, ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
def folios(path, limit=1 << 30):
    fd = os.open(path, os.O_RDONLY)
    size = min(os.fstat(fd).st_size, limit) & ~4095
    addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
    vec = (ctypes.c_ubyte * (size // 4096))()
    libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec)
    cached = sum(v & 1 for v in vec)
    libc.madvise(ctypes.c_void_p(addr), ctypes.c_size_t(size), 22)  # MADV_POPULATE_READ: map them, to find their frames
    pm, kf = open("/proc/self/pagemap", "rb"), open("/proc/kpageflags", "rb")
    pm.seek(addr // 4096 * 8); ents = pm.read(size // 4096 * 8)
    hist, run = collections.Counter(), 0
    for i in range(size // 4096):
        if not vec[i] & 1:  # read in just now: not what a loader left
            if run: hist[run * 4] += 1
            run = 0
            continue
        pfn = int.from_bytes(ents[i * 8:i * 8 + 8], "little") & ((1 << 55) - 1)
        kf.seek(pfn * 8); fl = int.from_bytes(kf.read(8), "little")
        if fl & (1 << 16) and run: run += 1; continue  # compound tail
        if run: hist[run * 4] += 1
        run = 1
    if run: hist[run * 4] += 1
    os.close(fd)
    return {"file": path, "bytes_checked": size, "cached_pages_before": cached, "folios_by_kib": dict(sorted(hist.items()))}
for p in sys.argv[1:]:
    print(json.dumps(folios(p)))
