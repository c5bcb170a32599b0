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

namespace {

// What smolvm itself puts in $SMOLVM_HOME: a home holding only these is
// smolvm's, whoever made it and however open it was left.
bool SmolvmMadeIt(const std::string& name) {
  static const char* const kNames[] = {"state.db", "machines", "packs", "cuda", "bench", "serve.db", "serve.sock",
                                       "serve.log"};
  for (const char* n : kNames)
    if (name == n || name.rfind(std::string(n) + "-", 0) == 0) return true;  // state.db-wal, -shm, -journal
  return false;
}

// Inside the home, what is the operator's alone (fixed in homes made
// before; each is also made so where it is created).
constexpr const char* kPrivateDirs[] = {"machines", "packs", "cuda", "bench"};
constexpr const char* kPrivateFiles[] = {"state.db", "state.db-wal", "state.db-shm", "serve.db", "serve.db-wal",
                                         "serve.db-shm"};

Status MakeDirMode(const std::string& dir, mode_t mode, bool home) {
  std::error_code ec;
  const bool made = std::filesystem::create_directories(dir, ec);
  if (ec) return Status(Code::kIo, "cannot create " + dir + ": " + ec.message());
  struct stat st;
  if (::lstat(dir.c_str(), &st) < 0) return ErrnoStatus("stat " + dir, errno);
  if (!S_ISDIR(st.st_mode)) return InvalidArgument(dir + " is not a directory");
  if (st.st_uid != ::geteuid())
    return PermissionDenied(dir + " belongs to uid " + std::to_string(st.st_uid) +
                            ", not this user: point SMOLVM_HOME at a directory of this user's own");
  if ((st.st_mode & 07777) != mode) {
    if (home && !made && (st.st_mode & 077) != 0) {
      for (const auto& e : std::filesystem::directory_iterator(dir, ec))
        if (!SmolvmMadeIt(e.path().filename().string()))
          return PermissionDenied(dir + " is open to other users and holds files that are not smolvm's (" +
                                  e.path().filename().string() +
                                  "): point SMOLVM_HOME at a directory of its own (smolvm keeps it 0711, its "
                                  "contents private)");
      if (ec) return Status(Code::kIo, "cannot list " + dir + ": " + ec.message());
    }
    if (::chmod(dir.c_str(), mode) < 0) return ErrnoStatus("chmod " + dir, errno);
  }
  if (home) {
    // A home made before (0755, machines/ 0711, state.db 0644): its
    // contents become the operator's too.
    for (const char* d : kPrivateDirs) {
      const std::string path = dir + "/" + d;
      if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) != 0700 &&
          ::chmod(path.c_str(), 0700) < 0)
        return ErrnoStatus("chmod 0700 " + path, errno);
    }
    for (const char* f : kPrivateFiles) {
      const std::string path = dir + "/" + f;
      if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 07777) != 0600 &&
          ::chmod(path.c_str(), 0600) < 0)
        return ErrnoStatus("chmod 0600 " + path, errno);
    }
  }
  return Status::Ok();
}

}  // namespace

Status MakeHome(const std::string& home) { return MakeDirMode(home, 0711, /*home=*/true); }

Status MakePrivateDir(const std::string& dir) { return MakeDirMode(dir, 0700, /*home=*/false); }

MachinePaths::MachinePaths(const std::string& home, const std::string& name) {
  dir = home + "/machines/" + name;
  log = dir + "/log";
  ctl_sock = dir + "/ctl.sock";
  cuda_sock = dir + "/cuda.sock";
  lease_sock = dir + "/lease.sock";
  run = dir + "/run";
  forkpoint_sock = run + "/forkpoint.sock";
  cuda_mount = run + "/cuda.sock";
  lease_mount = run + "/lease.sock";
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
