#include "daemon/daemon_jail.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "base/unique_fd.h"

namespace smolvm {
namespace {

// The daemon's own calls and what a worker makes before it loads its own
// filter, beyond the worker's table (worker_seccomp.cc). "fake": seen on
// this machine in learn mode over the daemon, fork, hostile and machine
// tests; "cuda": from the code (NVML in the daemon, the driver's start in a
// worker) until scripts/plans/harden.plan learns it on the GPU.
constexpr const char* kDaemonCalls[] = {
    // sockets: the guest, admin and endpoint sockets; worker links
    "socket", "socketpair", "bind", "listen", "accept", "accept4", "connect", "setsockopt", "getsockname",
    "getpeername",
    // processes: workers (fork + exec), their pidfds, exits and signals
    "wait4", "waitid", "kill", "pidfd_open", "pidfd_send_signal", "signalfd4", "execve", "setsid",
    // files: module cache, jail, cgroups, sockets' paths
    "chmod", "fchmodat", "chown", "fchown", "fchownat", "lchown", "link", "linkat", "symlink", "symlinkat",
    "truncate", "sync_file_range",
    // limits and identity: RLIMIT_NOFILE, a worker's uid change and jail
    "setrlimit", "setuid", "setgid", "setresuid", "setresgid", "setgroups", "setfsuid", "setfsgid", "capset",
    "seccomp", "personality",
    // the CUDA driver's start in a worker, NVML in the daemon (cuda)
    "sched_setscheduler", "sched_setparam", "ioprio_set", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
    "shmget", "shmat", "shmdt", "shmctl", "process_vm_readv", "mknodat",
};

constexpr int kKeep[] = {CAP_SETUID,  CAP_SETGID, CAP_SYS_RESOURCE, CAP_IPC_LOCK,        CAP_KILL,
                         CAP_CHOWN,   CAP_FOWNER, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH};

int LastCap() {
  int last = CAP_LAST_CAP;
  if (FILE* f = std::fopen("/proc/sys/kernel/cap_last_cap", "r")) {
    if (std::fscanf(f, "%d", &last) != 1) last = CAP_LAST_CAP;
    std::fclose(f);
  }
  return last;
}

Status DropCapabilities(std::string* summary) {
  const std::vector<int> keep = DaemonCapabilities();
  int dropped = 0;
  for (int cap = 0; cap <= LastCap(); ++cap) {
    if (std::find(keep.begin(), keep.end(), cap) != keep.end()) continue;
    if (::prctl(PR_CAPBSET_READ, cap, 0, 0, 0) != 1) continue;
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) return ErrnoStatus("PR_CAPBSET_DROP " + std::to_string(cap), errno);
    ++dropped;
  }
  (void)::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct now[2] = {};
  if (::syscall(SYS_capget, &header, now) < 0) return ErrnoStatus("capget", errno);
  // What it has of the kept ones (a container's root may lack some).
  struct __user_cap_data_struct data[2] = {};
  int kept = 0;
  for (int cap : keep) {
    const uint32_t bit = 1u << (cap % 32);
    if (!(now[cap / 32].permitted & bit)) continue;
    ++kept;
    data[cap / 32].effective |= bit;
    data[cap / 32].permitted |= bit;
  }
  if (::syscall(SYS_capset, &header, data) < 0) return ErrnoStatus("capset", errno);
  *summary += "capabilities: " + std::to_string(kept) + " of " + std::to_string(keep.size()) +
              " kept (setuid setgid sys_resource ipc_lock kill chown fowner dac_override dac_read_search, those it "
              "had), " + std::to_string(dropped) + " dropped from the bounding set";
  return Status::Ok();
}

}  // namespace

const char* DefaultDaemonSeccompMode(const std::string& backend, const std::string& worker_seccomp) {
  const std::string workers = worker_seccomp.empty() ? DefaultSeccompMode(backend) : worker_seccomp;
  return workers == "enforce" ? "enforce" : "log";
}

std::vector<int> DaemonCapabilities() { return std::vector<int>(std::begin(kKeep), std::end(kKeep)); }

SeccompTable DaemonSeccompTable() {
  SeccompTable t = WorkerSeccompTable();
  for (const char* name : kDaemonCalls) t.allow.push_back(name);
  std::sort(t.allow.begin(), t.allow.end());
  t.allow.erase(std::unique(t.allow.begin(), t.allow.end()), t.allow.end());
  t.processes = true;
  t.reporter = "smolvm daemon";
  t.exit_status = kDaemonExitSeccomp;
  t.flag = "--daemon-seccomp";
  return t;
}

Status EnterDaemonJail(const DaemonJailOptions& options, std::string* summary) {
  summary->clear();
  if (::geteuid() != 0) {
    *summary = "capabilities: none to drop (not root)";
  } else if (options.caps == "drop") {
    RETURN_IF_ERROR(DropCapabilities(summary));
  } else {
    *summary = "capabilities: all kept (--daemon-caps keep)";
  }
  const std::string mode_name = options.seccomp.empty() ? DefaultDaemonSeccompMode(options.backend, options.worker_seccomp) : options.seccomp;
  ASSIGN_OR_RETURN(SeccompMode mode, ParseSeccompMode(mode_name));
  UniqueFd learn;
  if (mode == SeccompMode::kLearn) {
    if (options.seccomp_learn.empty()) return InvalidArgument("--daemon-seccomp learn needs --daemon-seccomp-learn FILE");
    learn.Reset(::open(options.seccomp_learn.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644));
    if (!learn.valid()) return ErrnoStatus("open " + options.seccomp_learn, errno);
  }
  ASSIGN_OR_RETURN(WorkerSeccompFilter filter, WorkerSeccompFilter::Compile(mode, DaemonSeccompTable(), learn.get()));
  RETURN_IF_ERROR(filter.Load());
  *summary += std::string("; seccomp ") + SeccompModeName(mode) + " (" + std::to_string(DaemonSeccompTable().allow.size()) +
              " calls, inherited by its workers)";
  return Status::Ok();
}

}  // namespace smolvm
