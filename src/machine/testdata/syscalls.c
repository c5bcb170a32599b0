/* Prints "<name> <errno>" for the calls the machine's seccomp filter must
 * refuse, so the test can read the results back from inside. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <unistd.h>

static void report(const char* name, long r) { printf("%s %d\n", name, r < 0 ? errno : 0); }

int main(void) {
  errno = 0;
  report("clone3", syscall(SYS_clone3, NULL, 0));
  report("ptrace", ptrace(PTRACE_TRACEME, 0, 0, 0));
  report("bpf", syscall(SYS_bpf, 0, NULL, 0));
  report("keyctl", syscall(SYS_keyctl, 0, 0, 0, 0, 0));
  report("perf_event_open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
  report("userfaultfd", syscall(SYS_userfaultfd, 0));
  report("init_module", syscall(SYS_init_module, NULL, 0, ""));
  report("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0));
  report("reboot", syscall(SYS_reboot, 0, 0, 0, NULL));
  return 0;
}
