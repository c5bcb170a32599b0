#include "machine/process.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "machine/cgroups.h"

namespace smolvm::machine {
namespace {

std::string ReadStat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(in, s);
  return s;
}

}  // namespace

int64_t ProcessStartTime(pid_t pid) {
  if (pid <= 0) return 0;
  std::string s = ReadStat(pid);
  size_t close = s.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream in(s.substr(close + 2));
  std::string field;
  // Fields after "(comm)": state is field 3; starttime is field 22.
  for (int i = 3; i <= 22 && in >> field; ++i)
    if (i == 22) return std::stoll(field);
  return 0;
}

bool ProcessAlive(pid_t pid, int64_t start) {
  if (pid <= 0) return false;
  std::string s = ReadStat(pid);
  size_t close = s.rfind(')');
  if (close == std::string::npos || close + 2 >= s.size()) return false;
  char state = s[close + 2];
  if (state == 'Z' || state == 'X') return false;
  return start == 0 || ProcessStartTime(pid) == start;
}

Result<UniqueFd> OpenPidfd(pid_t pid, int64_t start) {
  if (pid <= 0) return NotFound("no process recorded");
  UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!fd.valid()) {
    if (errno == ESRCH) return NotFound("process " + std::to_string(pid) + " is gone");
    return ErrnoStatus("pidfd_open", errno);
  }
  // The pidfd pins the process; checking the start time after opening it
  // proves it is the one we recorded and not a recycled pid.
  if (!ProcessAlive(pid, start)) return NotFound("process " + std::to_string(pid) + " is gone");
  return fd;
}

bool WaitPidfd(int pidfd, int timeout_ms) {
  struct pollfd p = {pidfd, POLLIN, 0};
  for (;;) {
    int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    return r > 0;
  }
}

Status SignalPidfd(int pidfd, int sig) {
  if (::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0) < 0 && errno != ESRCH)
    return ErrnoStatus("pidfd_send_signal", errno);
  return Status::Ok();
}

pid_t ParentPid(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("PPid:", 0) == 0) return static_cast<pid_t>(std::stoi(line.substr(5)));
  return -1;
}

bool InMachineCgroup(pid_t pid, const std::string& name) {
  std::string path = "/proc/";
  path += std::to_string(pid);
  std::ifstream in(path + "/cgroup");
  std::string line;
  std::string want(1, '/');
  want += CgroupParentName();
  want += '/';
  want += name;
  while (std::getline(in, line))
    if (line.size() >= want.size() && line.compare(line.size() - want.size(), want.size(), want) == 0)
      return true;
  return false;
}

}  // namespace smolvm::machine
