// The machines' seccomp filter (libseccomp, linked statically).
//
// Denied with EPERM: module loading (init_module, finit_module,
// delete_module), kexec_load, kexec_file_load, reboot, the keyring (add_key,
// request_key, keyctl), bpf, perf_event_open, userfaultfd, ptrace,
// process_vm_readv/writev, open_by_handle_at, and ioctl(TIOCSTI/TIOCLINUX)
// (faking input on a terminal that `machine exec` shares with the host).
// clone3 returns ENOSYS so libc falls back to clone(2), whose flags a filter
// can inspect. Other architectures' system calls kill the process. mount,
// setns and unshare stay allowed: the user namespace bounds them.
#pragma once

#include "base/status.h"

namespace smolvm::machine {

// Sets no_new_privs and loads the filter into the calling thread (inherited
// by children and kept across execve).
Status ApplySeccompFilter();

}  // namespace smolvm::machine
