"""Base weights that clones share: smolvm.torch.frozen() and mark_frozen().

A clone shares (read-only, `--share on`) exactly the device memory its golden
marked frozen, chunk by chunk; a chunk is shared only when every allocated
byte in it is marked. torch's caching allocator packs tensors into segments,
so a weight must live in a segment that holds nothing mutable:

    import smolvm.torch
    with smolvm.torch.frozen():
        model = load_base_model().to("cuda")   # base weights in their own pool
    # marked frozen on leaving the block; LoRA, optimizer, activations go elsewhere

Every thread's allocations go to the pool while the block runs, not only the
calling thread's: loaders materialize weights in worker threads (transformers
5 loads safetensors in a thread pool), and torch.cuda.use_mem_pool() routes
only its own thread -- measured on the H200: the pool then held nothing but
transformers' caching-allocator warm-up block while every weight landed in
the default pool, so each clone copied the whole base.

Written against torch's API (torch.cuda.MemPool, memory_snapshot, and the
binding use_mem_pool is built on). Not runnable on CI (no torch there): the
fake torch in python/tests/fake_torch stands in.
"""

import contextlib

_pools = []  # frozen pools live as long as the process: their blocks never go back to a shared cache
_frozen = []  # (address, bytes) marked frozen by this process


@contextlib.contextmanager
def all_threads_to_pool(torch, pool, device=None):
    """Routes every thread's CUDA allocations on `device` to `pool` while the
    block runs (torch.cuda.use_mem_pool routes only the calling thread's).
    Falls back to use_mem_pool, with a warning, where torch lacks the binding."""
    begin = getattr(torch._C, "_cuda_beginAllocateToPool", None)
    if begin is None:
        import warnings

        warnings.warn("this torch has no _cuda_beginAllocateToPool: smolvm.torch.frozen() routes only the "
                      "calling thread's allocations (load the model without loader threads)", RuntimeWarning,
                      stacklevel=3)
        with torch.cuda.use_mem_pool(pool, device=device):
            yield
        return
    index = torch.cuda.current_device() if device is None else torch.cuda._utils._get_device_index(device)
    begin(index, pool.id)
    try:
        yield
    finally:
        torch._C._cuda_endAllocateToPool(index, pool.id)
        torch._C._cuda_releasePool(index, pool.id)


@contextlib.contextmanager
def frozen(device=None, mark=True):
    """Allocations inside the block -- by any thread -- go to a pool of their
    own (torch.cuda.MemPool); on leaving it, every segment of that pool is
    marked frozen. Yields the pool. mark=False: the same pool, nothing
    marked -- a native reference run (no smolvm shim to mark through) whose
    base then sits in the allocator as its golden's does.
    REQUIRES: no other thread allocates mutable CUDA tensors while the block runs."""
    import torch

    pool = torch.cuda.MemPool()
    with all_threads_to_pool(torch, pool, device):
        yield pool
    torch.cuda.synchronize(device)
    _pools.append(pool)
    if mark:
        _mark(segments_of_pool(torch.cuda.memory_snapshot(), pool.id))


def outside_frozen(module):
    """[(name, bytes)] of `module`'s CUDA parameters and buffers whose memory
    this process did not mark frozen (a clone copies them): empty when the
    base was loaded inside frozen()."""
    out, seen = [], set()
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        if not t.is_cuda:
            continue
        s = t.untyped_storage()
        addr, size = s.data_ptr(), s.nbytes()
        if addr in seen:
            continue
        seen.add(addr)
        if not any(lo <= addr and addr + size <= lo + n for lo, n in _frozen):
            out.append((name, size))
    return out


def mark_frozen(module):
    """Marks the device memory of `module`'s parameters and buffers frozen.
    Each must sit in a segment that holds only tensors of `module`; ValueError
    names the first that shares its segment (load it inside frozen())."""
    import torch

    storages = {}
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        if t.is_cuda:
            s = t.untyped_storage()
            storages[s.data_ptr()] = (s.nbytes(), name)
    torch.cuda.synchronize()
    _mark(segments_holding(torch.cuda.memory_snapshot(), storages))


def segments_of_pool(snapshot, pool_id):
    """[(address, bytes)] of the snapshot's segments that belong to pool `pool_id`."""
    want = tuple(pool_id)
    return [(s["address"], s["total_size"]) for s in snapshot if tuple(s.get("segment_pool_id", ())) == want]


def segments_holding(snapshot, storages):
    """[(address, bytes)] of the segments holding `storages` ({address: (bytes, name)}),
    when every block in use in each is one of them; ValueError names a tensor
    that shares its segment with something else."""
    out = []
    for seg in snapshot:
        lo, hi = seg["address"], seg["address"] + seg["total_size"]
        mine = [a for a in storages if lo <= a < hi]
        if not mine:
            continue
        for block in seg.get("blocks", []):
            if block.get("state") == "active_allocated" and block["address"] not in storages:
                raise ValueError("%s shares its allocation (segment 0x%x) with tensors outside the module: "
                                 "load the module inside smolvm.torch.frozen()" % (storages[mine[0]][1], lo))
        out.append((lo, seg["total_size"]))
    return out


def _mark(ranges):
    if not ranges:
        raise ValueError("nothing to mark frozen: no CUDA memory was allocated")
    import smolvm

    for address, size in ranges:
        smolvm.mark_frozen(address, size)
        _frozen.append((address, size))


def _mib(n):
    return "%.1f MiB" % (n / 2**20)


def describe_memory(snapshot, stats, frozen_pools=()):
    """Lines saying what a clone would copy: torch's allocated and reserved
    bytes (torch.cuda.memory_stats), and per pool (segment_pool_id) its
    segments, reserved and live bytes; then the live blocks outside the
    frozen pools, by size. `snapshot`: torch.cuda.memory_snapshot()."""
    frozen_ids = {tuple(p) for p in frozen_pools}
    lines = ["torch: allocated %s, reserved %s, inactive split %s" % (
        _mib(stats.get("allocated_bytes.all.current", 0)), _mib(stats.get("reserved_bytes.all.current", 0)),
        _mib(stats.get("inactive_split_bytes.all.current", 0)))]
    pools, sizes = {}, {}
    for seg in snapshot:
        pid = tuple(seg.get("segment_pool_id", (0, 0)))
        p = pools.setdefault(pid, [0, 0, 0])
        p[0] += 1
        p[1] += seg["total_size"]
        for block in seg.get("blocks", []):
            if block.get("state") != "active_allocated":
                continue
            p[2] += block["size"]
            if pid not in frozen_ids:
                sizes[block["size"]] = sizes.get(block["size"], 0) + 1
    for pid, (n, reserved, live) in sorted(pools.items()):
        lines.append("pool %s%s: %d segments, reserved %s, live %s" % (
            "default" if pid == (0, 0) else "(%d, %d)" % pid, " (frozen)" if pid in frozen_ids else "", n,
            _mib(reserved), _mib(live)))
    total = sum(s * n for s, n in sizes.items())
    top = sorted(sizes.items(), key=lambda kv: -kv[0] * kv[1])[:8]
    lines.append("live outside frozen pools: %d blocks, %s%s%s" % (
        sum(sizes.values()), _mib(total), "; largest: " if top else "",
        ", ".join("%d x %s" % (n, _mib(s)) for s, n in top)))
    return lines


def memory_report():
    """describe_memory() of this process now (empty when CUDA is not initialized)."""
    import torch

    if not torch.cuda.is_initialized():
        return []
    return describe_memory(torch.cuda.memory_snapshot(), torch.cuda.memory_stats(), [p.id for p in _pools])
