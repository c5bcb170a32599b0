#include "machine/seccomp.h"

#include <errno.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>

namespace smolvm::machine {

Status ApplySeccompFilter() {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return ErrnoStatus("prctl(NO_NEW_PRIVS)", errno);
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) return Internal("seccomp_init failed");
  int rc = 0;
  const char* denied[] = {"init_module", "finit_module", "delete_module", "kexec_load",
                          "kexec_file_load", "reboot", "add_key", "request_key", "keyctl",
                          "bpf", "perf_event_open", "userfaultfd", "ptrace",
                          "process_vm_readv", "process_vm_writev", "open_by_handle_at"};
  for (const char* name : denied) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
    if (rc < 0) break;
  }
  if (rc == 0) {
    int nr = seccomp_syscall_resolve_name("clone3");
    if (nr != __NR_SCMP_ERROR) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0);
  }
  for (unsigned long req : {static_cast<unsigned long>(TIOCSTI), static_cast<unsigned long>(TIOCLINUX)}) {
    if (rc != 0) break;
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                          SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, req));
  }
  if (rc == 0) rc = seccomp_load(ctx);
  seccomp_release(ctx);
  if (rc < 0) return ErrnoStatus("loading the seccomp filter", -rc);
  return Status::Ok();
}

}  // namespace smolvm::machine
