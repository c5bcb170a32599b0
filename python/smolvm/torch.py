"""Base weights that clones share: smolvm.torch.frozen() and mark_frozen().

A clone shares (read-only, `--share on`) exactly the device memory its golden
marked frozen, chunk by chunk; a chunk is shared only when every allocated
byte in it is marked. torch's caching allocator packs tensors into segments,
so a weight must live in a segment that holds nothing mutable:

    import smolvm.torch
    with smolvm.torch.frozen():
        model = load_base_model().to("cuda")   # base weights in their own pool
    # marked frozen on leaving the block; LoRA, optimizer, activations go elsewhere

Written against torch's public API (torch.cuda.MemPool, use_mem_pool,
memory_snapshot). Not runnable on CI (no torch there): verified on the H200
only once torch runs through the shims (issue 13).
"""

import contextlib

_pools = []  # frozen pools live as long as the process: their blocks never go back to a shared cache


@contextlib.contextmanager
def frozen(device=None):
    """Allocations inside the block go to a pool of their own (torch.cuda.MemPool);
    on leaving it, every segment of that pool is marked frozen. Yields the pool."""
    import torch

    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool, device=device):
        yield pool
    torch.cuda.synchronize(device)
    _pools.append(pool)
    _mark(segments_of_pool(torch.cuda.memory_snapshot(), pool.id))


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
