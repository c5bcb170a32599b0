// The host side of a gVisor machine's bundle: its root and its staging
// directory (gvisor_internal.h).
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "machine/gvisor_internal.h"
#include "machine/sandbox_internal.h"

namespace smolvm::machine::gvisor_internal {
namespace {

// mkdir -p below root (host side, as root).
Status MkDirsUnder(const std::string& root, const std::string& guest_path) {
  std::string cur = root;
  std::istringstream parts(guest_path);
  std::string part;
  while (std::getline(parts, part, '/')) {
    if (part.empty()) continue;
    cur += "/" + part;
    if (::mkdir(cur.c_str(), 0755) < 0 && errno != EEXIST) return ErrnoStatus("mkdir " + cur, errno);
  }
  return Status::Ok();
}

}  // namespace

// The bundle's root: the symlinks of a merged /usr (bin -> usr/bin, ...) and
// the mount point of everything mounted over it. runsc's gofer mounts the
// binds inside the machine's user namespace, where it cannot create them in
// this root-owned directory. Returns the host system directories to bind.
Result<std::vector<std::string>> MakeRoot(const std::string& root, const MachineSpec& spec, const std::string& workdir) {
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
  RETURN_IF_ERROR(MkDir(root, 0755));
  std::vector<std::string> dirs;
  for (const char* d : kSystemDirs) {
    std::string host = std::string("/") + d;
    struct stat st;
    if (::lstat(host.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char target[256];
      ssize_t n = ::readlink(host.c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      if (::symlink(target, (root + host).c_str()) < 0) return ErrnoStatus("symlink " + root + host, errno);
    } else if (S_ISDIR(st.st_mode)) {
      RETURN_IF_ERROR(MkDir(root + host, 0755));
      dirs.push_back(host);
    }
  }
  for (const char* d : {"/proc", "/sys", "/dev", "/tmp", "/workspace", "/run/smolvm"}) RETURN_IF_ERROR(MkDirsUnder(root, d));
  for (const auto& v : spec.volumes) {
    struct stat st;
    if (::stat(v.host.c_str(), &st) != 0) return ErrnoStatus("volume " + v.host, errno);
    if (S_ISDIR(st.st_mode)) {
      RETURN_IF_ERROR(MkDirsUnder(root, v.guest));
      continue;
    }
    RETURN_IF_ERROR(MkDirsUnder(root, v.guest.substr(0, v.guest.rfind('/'))));
    UniqueFd f(::open((root + v.guest).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
    if (!f.valid() && errno != EISDIR) return ErrnoStatus("create " + root + v.guest, errno);
  }
  RETURN_IF_ERROR(MkDirsUnder(root, workdir));
  // Read-only from here on: the guest sees it so, and runsc's gofer serves
  // it read-only anyway (the bundle's root is readonly).
  if (::chmod(root.c_str(), 0555) < 0) return ErrnoStatus("chmod " + root, errno);
  return dirs;
}

Result<Staging> Staging::Make(const GvisorPaths& g) {
  char tmpl[] = "/tmp/smolvm-gvisor-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return ErrnoStatus("mkdtemp /tmp/smolvm-gvisor-XXXXXX", errno);
  Staging s(tmpl);
  RETURN_IF_ERROR(WriteFile(g.dir + "/staging", s.dir_ + "\n", 0600));
  // No nosuid/nodev: the gofer remounts the root read-only from inside the
  // machine's user namespace, where it could not drop flags locked here.
  if (::mount("tmpfs", s.dir_.c_str(), "tmpfs", 0, "mode=0711,size=1m") < 0)
    return ErrnoStatus("mount tmpfs on " + s.dir_, errno);
  return s;
}

Result<std::string> Staging::Bind(const std::string& src, const std::string& name, bool read_only) const {
  std::string dst = dir_ + "/" + name;
  struct stat st;
  if (::stat(src.c_str(), &st) < 0) return ErrnoStatus("stat " + src, errno);
  if (S_ISDIR(st.st_mode)) {
    RETURN_IF_ERROR(MkDir(dst, 0755));
  } else {
    UniqueFd f(::open(dst.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
    if (!f.valid()) return ErrnoStatus("create " + dst, errno);
  }
  if (::mount(src.c_str(), dst.c_str(), nullptr, MS_BIND | MS_REC, nullptr) < 0)
    return ErrnoStatus("bind " + src + " on " + dst, errno);
  if (read_only && ::mount(nullptr, dst.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) < 0)
    return ErrnoStatus("remount " + dst + " read-only", errno);
  return dst;
}

void Staging::Remove(const GvisorPaths& g) {
  std::ifstream in(g.dir + "/staging");
  std::string dir;
  if (!std::getline(in, dir) || dir.rfind("/tmp/smolvm-gvisor-", 0) != 0 || dir.find("..") != std::string::npos) return;
  ::umount2(dir.c_str(), MNT_DETACH);
  ::rmdir(dir.c_str());
  ::unlink((g.dir + "/staging").c_str());
}

}  // namespace smolvm::machine::gvisor_internal
