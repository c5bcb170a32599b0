#include "machine/paths.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace smolvm::machine {

std::string SmolvmHome() {
  const char* h = ::getenv("SMOLVM_HOME");
  if (h != nullptr && h[0] != '\0') return h;
  const char* home = ::getenv("HOME");
  return std::string(home != nullptr && home[0] != '\0' ? home : "/root") + "/.local/share/smolvm";
}

Status MakePrivateDir(const std::string& dir) {
  std::error_code ec;
  const bool made = std::filesystem::create_directories(dir, ec);
  if (ec) return Status(Code::kIo, "cannot create " + dir + ": " + ec.message());
  struct stat st;
  if (::lstat(dir.c_str(), &st) < 0) return ErrnoStatus("stat " + dir, errno);
  if (!S_ISDIR(st.st_mode)) return InvalidArgument(dir + " is not a directory");
  if ((st.st_mode & 07777) == 0700) return Status::Ok();
  if (st.st_uid != ::geteuid())
    return PermissionDenied(dir + " belongs to uid " + std::to_string(st.st_uid) +
                            " and is open to other users: point SMOLVM_HOME at a directory of this user's own");
  const bool ours = made || std::filesystem::exists(dir + "/state.db", ec) || std::filesystem::is_empty(dir, ec);
  if (!ours && (st.st_mode & 077) != 0)
    return PermissionDenied(dir + " is open to other users and holds files that are not smolvm's: point SMOLVM_HOME "
                            "at a directory of its own (smolvm keeps it 0700)");
  if (::chmod(dir.c_str(), 0700) < 0) return ErrnoStatus("chmod 0700 " + dir, errno);
  return Status::Ok();
}

MachinePaths::MachinePaths(const std::string& home, const std::string& name) {
  dir = home + "/machines/" + name;
  log = dir + "/log";
  ctl_sock = dir + "/ctl.sock";
  cuda_sock = dir + "/cuda.sock";
  run = dir + "/run";
  forkpoint_sock = run + "/forkpoint.sock";
  cuda_mount = run + "/cuda.sock";
  lib = run + "/lib";
  root = dir + "/root";
  layers = dir + "/layers";
  guest = dir + "/guest";
  upper = guest + "/upper";
  work = guest + "/work";
}

std::string ShimDir() {
  const char* d = ::getenv("SMOLVM_SHIM_DIR");
  if (d != nullptr && d[0] != '\0') return d;
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "shim";
  std::string exe(buf, static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/')) + "/shim";
}

}  // namespace smolvm::machine
