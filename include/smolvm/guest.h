/* smolvm guest library (libsmolvm-guest.so): what a program running inside a
 * smolvm machine (or under the CUDA shim) calls to become forkable.
 *
 * Plain C ABI, usable from C, C++ and Python (ctypes):
 *
 *   import ctypes
 *   g = ctypes.CDLL("libsmolvm-guest.so")
 *   idx = g.smolvmForkpoint()   # golden blocks here; each clone returns 0, 1, 2, ...
 *
 * Thread safety: every function may be called from any thread; concurrent
 * smolvmForkpoint() calls are serialized (one waits while another is at the
 * forkpoint).
 */
#ifndef SMOLVM_GUEST_H_
#define SMOLVM_GUEST_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The golden blocks here. Each fork request forks the calling process; in the
 * child (the clone) the call returns its clone index (0, 1, 2, ... in the
 * order forked), with SMOLVM_FORK_INDEX and SMOLVM_FORK_NAME set in its
 * environment, its own hostname, /tmp and /workspace, and stdout/stderr going
 * to the clone machine's log. The golden returns a negative errno-style value
 * only:
 *   -ECANCELED  released by the controller (machine stopped, `cuda release`);
 *   -ENOTSUP    no controller (no SMOLVM_FORKPOINT_SOCKET and no CUDA shim
 *               controller), or the real libcudart/libcuda is loaded;
 *   -EPERM      the controller refused (e.g. a clone asking to be a golden);
 *   -EBUSY      another process of this machine already waits at the forkpoint;
 *   -EIO/-ECONNRESET/...  the controller went away.
 * Before forking it flushes stdio and calls the CUDA hooks (see below), so no
 * lock of the shim is held half-way in the child. */
int smolvmForkpoint(void);

/* Marks device memory [device_ptr, device_ptr + bytes) as frozen: shareable
 * read-only between a golden and its clones (`--share on`). Returns 0 or a
 * negative errno-style code: -ENOTSUP without the CUDA shim, -EINVAL / -EFAULT
 * when the range is not device memory or not allocated (decided by the shim). */
int smolvmMarkFrozen(const void* device_ptr, size_t bytes);

/* ---- Seam for the CUDA shim (libcudart.so.13 shim calls this at load) ----
 *
 * The shim registers callbacks once; the guest library calls them around the
 * fork. All callbacks run in the calling thread of smolvmForkpoint(). Fields
 * may be NULL. `size` must be sizeof(struct smolvm_cuda_hooks) as compiled by
 * the caller (lets the struct grow). */
struct smolvm_cuda_hooks {
  size_t size;
  void* ctx; /* passed back to every callback */

  /* In the golden, before fork(2): flush the call queue, synchronize, take the
   * shim's locks. `share` is "on", "off" or "auto"; `token` is the controller's
   * opaque fork token for the daemon ("" when none). Non-zero aborts this
   * fork with that (negative errno) value reported to the controller. */
  int (*prepare_fork)(void* ctx, int clone_index, const char* share, const char* token);
  /* In the golden after the fork (ok = 1 when the child was created): drop the
   * locks taken in prepare_fork. */
  void (*parent_after_fork)(void* ctx, int ok);
  /* In the clone, before smolvmForkpoint() returns there: move the pinned host
   * region to a private copy at the same addresses, re-handshake with the
   * daemon as role=clone using `token`. Non-zero makes the clone exit with
   * status 70 (its machine shows failed) rather than run with a broken GPU
   * session. */
  int (*child_after_fork)(void* ctx, int clone_index, const char* token);
  /* Implements smolvmMarkFrozen. */
  int (*mark_frozen)(void* ctx, const void* device_ptr, size_t bytes);
  /* Controller outside machines: when SMOLVM_FORKPOINT_SOCKET is unset the
   * library calls this instead (the daemon forks through the shim's session).
   * It behaves like smolvmForkpoint(). NULL: -ENOTSUP. */
  int (*forkpoint)(void* ctx);
};

/* Registers (or with NULL, removes) the hooks. Returns 0, or -EINVAL when
 * hooks->size is smaller than the fields this library needs. */
int smolvm_guest_set_cuda_hooks(const struct smolvm_cuda_hooks* hooks);

#ifdef __cplusplus
}
#endif

#endif /* SMOLVM_GUEST_H_ */
