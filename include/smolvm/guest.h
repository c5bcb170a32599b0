/* smolvm guest library (libsmolvm-guest.so): what a program running inside a
 * smolvm machine (or under the CUDA shim) calls to become forkable.
 *
 * Plain C ABI, usable from C, C++ and Python (ctypes). C and C++ programs
 * call smolvmForkpoint(); a runtime that must perform the fork itself (Python:
 * os.fork() runs CPython's after-fork work) drives the same fork as steps,
 * smolvm_fork_wait / _prepare / _child / _parent below. Python programs use
 * the `smolvm` package (python/smolvm), which does that:
 *
 *   import smolvm
 *   idx = smolvm.forkpoint()   # golden blocks here; each clone gets 0, 1, 2, ...
 *
 * Thread safety: every function may be called from any thread; concurrent
 * smolvmForkpoint() calls are serialized (one waits while another is at the
 * forkpoint). The steps are driven by one thread at a time.
 */
#ifndef SMOLVM_GUEST_H_
#define SMOLVM_GUEST_H_

#include <stddef.h>
#include <sys/types.h>

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
 *   -EPERM      also: called from a Python process (a C fork skips CPython's
 *               after-fork work; the message on stderr says to use
 *               smolvm.forkpoint(), which forks through os.fork());
 *   -EIO/-ECONNRESET/...  the controller went away.
 * Before forking it flushes stdio and calls the CUDA hooks (see below), so no
 * lock of the shim is held half-way in the child. It is the loop of the steps
 * below with fork(2) as the fork. */
int smolvmForkpoint(void);

/* ---- The fork as steps ------------------------------------------------------
 *
 * The same fork as smolvmForkpoint(), for a runtime that performs fork(2)
 * itself. The golden's loop:
 *
 *   struct smolvm_fork_order o;
 *   for (;;) {
 *     int r = smolvm_fork_wait(&o);         // blocks until an order (or release)
 *     if (r < 0) return r;                  // -ECANCELED: released; else an error
 *     r = smolvm_fork_prepare(&o);          // the last call before fork(2)
 *     if (r < 0) { smolvm_fork_parent(&o, r); continue; }   // reports the failure
 *     pid_t pid = fork();                   // Python: os.fork()
 *     if (pid == 0) return smolvm_fork_child(&o);  // the clone's index, in the clone
 *     smolvm_fork_parent(&o, pid > 0 ? pid : -errno);
 *   }
 *
 * Between smolvm_fork_wait's order and smolvm_fork_parent/_child the CUDA shim
 * (when loaded) holds its session: nothing in the process may make a CUDA
 * call until the fork is done. Steps out of this order return -EINVAL. */
struct smolvm_fork_order {
  int index;        /* clone index: 0, 1, 2, ... in the order forked */
  char name[64];    /* the clone machine's name ("" outside machines) */
  char share[8];    /* "on", "off", "auto" ("" when the daemon decides) */
  char token[256];  /* the controller's opaque token ("" when none) */
};

/* sizeof(struct smolvm_fork_order) as this library was built: lets a binding
 * (ctypes) check its copy of the layout. */
size_t smolvm_fork_order_size(void);

/* Blocks until the controller orders a fork (returns 0 with *order filled) or
 * releases the golden (-ECANCELED); other errors as smolvmForkpoint(). The
 * first call connects to the controller; the connection stays open across
 * orders and closes when it returns a negative value. */
int smolvm_fork_wait(struct smolvm_fork_order* order);

/* Right before fork(2): calls the CUDA shim's prepare hook and flushes stdio.
 * 0, or a negative errno: this fork is off (pass it to smolvm_fork_parent). */
int smolvm_fork_prepare(const struct smolvm_fork_order* order);

/* In the child, first thing after fork(2). Inside a machine the child becomes
 * the clone machine (its namespaces, cgroup and pid 1 are made by further
 * forks done here in C: the process that returns is a fork of the caller's
 * single thread) and returns the clone index in the clone's program, with
 * SMOLVM_FORK_INDEX, SMOLVM_FORK_NAME and HOSTNAME set and
 * SMOLVM_FORKPOINT_SOCKET unset in the C environment (a runtime with its own
 * copy of the environment must refresh it), stdout/stderr on the clone's log,
 * and the CUDA session re-attached as the clone. Any failure ends the process
 * (_exit 70: the CUDA session could not re-attach; 71-79: a machine step).
 * Inside a machine it returns once the supervisor has made every clone of
 * the request: a request's clones start together; a parked clone's (`machine
 * fork --park`, serve's pools) once its first lease payload came. It is
 * smolvm_fork_child_attach then smolvm_fork_child_park. */
int smolvm_fork_child(const struct smolvm_fork_order* order);

/* smolvm_fork_child in two halves, for a clone that warms up before it parks
 * (python: smolvm.forkpoint(warmup=fn)):
 *
 *     int idx = smolvm_fork_child_attach(&o);  // as smolvm_fork_child, but at once
 *     ... warm up: the clone's own work (e.g. one training step), CUDA included ...
 *     smolvm_fork_child_park();                 // parked: returns when it may go on
 *
 * _attach returns the clone index (or exits, as smolvm_fork_child) right
 * after the CUDA session re-attached, before the start. _park tells the
 * supervisor the clone is parked and waits for its start: the request's
 * other clones made (and, parked, its first lease payload). A parked fork
 * request is answered once each of its clones parked, so a pool counts a
 * clone ready only when its warm-up is done; a clone that ends before it
 * parks fails its request. Outside machines (the daemon as controller) _park
 * returns at once. Returns 0, or -EINVAL when no _attach came before (from
 * the same process). */
int smolvm_fork_child_attach(const struct smolvm_fork_order* order);
int smolvm_fork_child_park(void);

/* In the golden after fork(2): `pid` is the child's pid, or a negative errno
 * when fork(2) or smolvm_fork_prepare failed. Releases what prepare took,
 * and reports the fork to the controller; the short-lived child is reaped
 * once it ends (here or at a later step, at the latest when the golden leaves
 * its forkpoint), so the golden can fork the next clone while the supervisor
 * still sets this one up. 0, or a negative errno (the connection is then
 * closed: the golden left). */
int smolvm_fork_parent(const struct smolvm_fork_order* order, pid_t pid);

/* Marks device memory [device_ptr, device_ptr + bytes) as frozen: shareable
 * read-only between a golden and its clones (`--share on`). Returns 0 or a
 * negative errno-style code: -ENOTSUP without the CUDA shim, -EINVAL / -EFAULT
 * when the range is not device memory or not allocated (decided by the shim). */
int smolvmMarkFrozen(const void* device_ptr, size_t bytes);

/* ---- The lease link (in a clone) ---------------------------------------------
 *
 * A clone's program takes its work from the host and answers on its lease link
 * (docs/machines.md, "Parked clones and the lease link"; smolvm serve's leases
 * use it). The host sends payloads (JSON objects, numbered 1, 2, ...); the
 * program answers each with replies and ends the lease with a result:
 *
 *   int idx = smolvmForkpoint();            // a parked clone returns once its first payload came
 *   char* p; size_t n;
 *   for (int r = smolvmLeasePayload(&p, &n); r == 0; r = smolvmNextPayload(&p, &n)) {
 *     ... work on p ...
 *     smolvmReply(answer, strlen(answer));  // answers payload p
 *     smolvmLeaseFree(p);
 *   }
 *   smolvmComplete(result, strlen(result)); // or exit: either ends the lease
 *
 * Memory: a payload returned in *json is the callee's malloc()ed copy of the
 * JSON text, NUL-terminated, *len bytes without the NUL; the caller owns it
 * and releases it with smolvmLeaseFree() (free() works too). On any other
 * return *json is NULL and *len 0. JSON the program sends is copied before
 * the call returns.
 *
 * Returns: 0; SMOLVM_LEASE_ENDED (payload calls only) when no payload will
 * come any more: the host ended the lease (LeaseLink::End), the program
 * completed it, or the supervisor closed the link; or a negative errno:
 *   -ENOTSUP    no lease link here (not a clone of a smolvm machine, or a golden);
 *   -EINVAL     a NULL argument, or JSON that is empty or longer than 1 MiB;
 *   -EPIPE      smolvmReply/Complete after smolvmComplete, or the link was
 *               closed (the supervisor refused a frame: the lease failed);
 *   -EPERM      a process other than the one that first used the link (a fork
 *               of the program: the link is not shared);
 *   -EPROTO     the supervisor's frame broke the protocol;
 *   -ECONNRESET/-EIO/...  the link failed.
 * The JSON a program sends must be one strict JSON value (UTF-8, no NaN, at
 * most 128 levels deep); the supervisor checks it, and one that is not fails
 * the lease (the host sees a fault) and closes the link.
 *
 * Threads: the payload calls wait one at a time, the sending calls likewise;
 * one thread may reply while another waits for the next payload. The link is
 * opened at the first call (a unix socket at /run/smolvm/lease.sock, or
 * $SMOLVM_LEASE_SOCKET). */
#define SMOLVM_LEASE_ENDED 1

/* The lease's first payload (number 1), waiting until it comes. May be called
 * again: it returns the same payload each time. */
int smolvmLeasePayload(char** json, size_t* len);

/* The next payload not yet returned (by either call), waiting until it comes:
 * the first call returns the lease payload unless smolvmLeasePayload did. */
int smolvmNextPayload(char** json, size_t* len);

/* Answers the payload most recently returned (its number travels with it).
 * Any number of replies per payload. */
int smolvmReply(const char* json, size_t len);

/* Ends the lease with a result; the link closes after it. */
int smolvmComplete(const char* json, size_t len);

/* Releases a payload returned by the calls above. NULL is a no-op. */
void smolvmLeaseFree(char* json);

/* ---- Seam for the CUDA shim (libcudart.so.13 shim calls this at load) ----
 *
 * The shim registers callbacks once (or exports smolvm_shim_cuda_hooks(),
 * found also when the shim was loaded RTLD_LOCAL); the guest library calls
 * them around the fork, from the steps (smolvmForkpoint() included), in the
 * thread that drives them. Fields
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
  /* Controller outside machines, a whole loop: when SMOLVM_FORKPOINT_SOCKET is
   * unset and wait_order is NULL, smolvmForkpoint() calls this instead. It
   * behaves like smolvmForkpoint(). NULL: -ENOTSUP. */
  int (*forkpoint)(void* ctx);
  /* Controller outside machines, as a step (preferred over `forkpoint`): when
   * SMOLVM_FORKPOINT_SOCKET is unset, smolvm_fork_wait() calls this. Blocks
   * for the daemon's order; on 0 it filled *index and token (NUL-terminated,
   * at most token_cap bytes) and holds the session until parent_after_fork or
   * child_after_fork (prepare_fork is not called in this mode). Negative
   * errno: -ECANCELED when released. */
  int (*wait_order)(void* ctx, int* index, char* token, size_t token_cap);
};

/* Registers (or with NULL, removes) the hooks. Returns 0, or -EINVAL when
 * hooks->size does not cover the fields up to `forkpoint`; fields past
 * hooks->size (a shim built against an older header) are taken as NULL. */
int smolvm_guest_set_cuda_hooks(const struct smolvm_cuda_hooks* hooks);

#ifdef __cplusplus
}
#endif

#endif /* SMOLVM_GUEST_H_ */
