// The guest's root filesystem, built by pid 1 of a new machine inside its
// own user and mount namespaces (see sandbox.h for the layout it produces).
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "machine/cuda_libs.h"
#include "machine/sandbox_internal.h"

namespace smolvm::machine {
namespace {

Status Mount(const std::string& src, const std::string& dst, const char* type, unsigned long flags,
             const std::string& data = "") {
  if (::mount(src.empty() ? nullptr : src.c_str(), dst.c_str(), type, flags,
              data.empty() ? nullptr : data.c_str()) < 0)
    return ErrnoStatus("mount " + (src.empty() ? std::string(type ? type : "") : src) + " on " + dst, errno);
  return Status::Ok();
}

Status MkDir(const std::string& path, mode_t mode = 0755) {
  if (::mkdir(path.c_str(), mode) < 0 && errno != EEXIST) return ErrnoStatus("mkdir " + path, errno);
  return Status::Ok();
}

// mkdir -p relative to the new root (cwd); fails on read-only parents.
Status MkDirs(const std::string& rel) {
  std::string cur;
  size_t at = 0;
  while (at < rel.size()) {
    size_t next = rel.find('/', at);
    if (next == std::string::npos) next = rel.size();
    if (!cur.empty()) cur += '/';
    cur += rel.substr(at, next - at);
    at = next + 1;
    if (cur.empty()) continue;
    RETURN_IF_ERROR(MkDir(cur));
  }
  return Status::Ok();
}

Status Touch(const std::string& path) {
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0 && errno != EEXIST) return ErrnoStatus("create " + path, errno);
  if (fd >= 0) ::close(fd);
  return Status::Ok();
}

// Sets attributes on a mount and everything under it; falls back to a
// remount (top mount only) on kernels without mount_setattr. Flags a less
// privileged namespace may not clear (nosuid, nodev, noexec) are kept.
Status SetAttrs(const std::string& path, bool read_only) {
  struct mount_attr attr = {};
  attr.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (read_only ? MOUNT_ATTR_RDONLY : 0);
  if (::syscall(SYS_mount_setattr, AT_FDCWD, path.c_str(), AT_RECURSIVE, &attr, sizeof attr) == 0)
    return Status::Ok();
  if (errno != ENOSYS) return ErrnoStatus("mount_setattr " + path, errno);
  struct statvfs sv;
  if (::statvfs(path.c_str(), &sv) < 0) return ErrnoStatus("statvfs " + path, errno);
  unsigned long flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | (read_only ? MS_RDONLY : 0);
  if (sv.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (sv.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (sv.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (sv.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  return Mount("", path, nullptr, flags);
}

Status Bind(int src_fd, const std::string& dst, bool read_only) {
  RETURN_IF_ERROR(Mount(FdPath(src_fd), dst, nullptr, MS_BIND | MS_REC));
  return SetAttrs(dst, read_only);
}

Status SetupDev(bool have_dir) {
  if (!have_dir) RETURN_IF_ERROR(MkDir("dev"));
  RETURN_IF_ERROR(Mount("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=1m"));
  for (const char* n : {"null", "zero", "full", "random", "urandom", "tty"}) {
    std::string dst = std::string("dev/") + n;
    RETURN_IF_ERROR(Touch(dst));
    RETURN_IF_ERROR(Mount(std::string("/dev/") + n, dst, nullptr, MS_BIND));
  }
  RETURN_IF_ERROR(MkDir("dev/pts"));
  RETURN_IF_ERROR(Mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                        "newinstance,ptmxmode=0666,mode=0620"));
  RETURN_IF_ERROR(MkDir("dev/shm", 01777));
  RETURN_IF_ERROR(Mount("tmpfs", "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"));
  const char* links[][2] = {{"pts/ptmx", "dev/ptmx"},          {"/proc/self/fd", "dev/fd"},
                            {"/proc/self/fd/0", "dev/stdin"},  {"/proc/self/fd/1", "dev/stdout"},
                            {"/proc/self/fd/2", "dev/stderr"}};
  for (auto& l : links)
    if (::symlink(l[0], l[1]) < 0 && errno != EEXIST) return ErrnoStatus(std::string("symlink ") + l[1], errno);
  return Status::Ok();
}

}  // namespace

std::string FdPath(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

Status MountCgroupFs(const std::string& root, const CgroupLayout& layout) {
  std::string base = root + "/sys/fs/cgroup";
  unsigned long ro = MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY;
  if (layout.v2) return Mount("cgroup2", base, "cgroup2", ro);
  RETURN_IF_ERROR(Mount("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k"));
  for (const auto& h : layout.hierarchies) {
    std::string name = h.mount_point.substr(h.mount_point.rfind('/') + 1);
    RETURN_IF_ERROR(MkDir(base + "/" + name));
    RETURN_IF_ERROR(Mount("cgroup", base + "/" + name, "cgroup", ro, h.controllers));
  }
  return Mount("", base, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC);
}

namespace {

// mkdir -p of `rel` below the directory fd `at` (for the pack's skeleton).
Status MkDirsAt(const std::string& base, const std::string& rel, mode_t mode = 0755) {
  std::string cur = base;
  size_t at = 0;
  while (at < rel.size()) {
    size_t next = rel.find('/', at);
    if (next == std::string::npos) next = rel.size();
    std::string part = rel.substr(at, next - at);
    at = next + 1;
    if (part.empty()) continue;
    cur += "/" + part;
    RETURN_IF_ERROR(MkDir(cur, mode));
  }
  return Status::Ok();
}

bool UnderDir(const std::string& path, const char* dir) {
  std::string d = dir;
  return path == d || path.rfind(d + "/", 0) == 0;
}

// A pack's root: a read-only overlay of a small skeleton (the mount points
// this machine needs: /tmp, /workspace, /proc ..., the volumes' paths and the
// host system directories the pack lacks) over the pack's image.
Status PackRoot(const SandboxConfig& cfg, const HostFds& fds, const std::string& root) {
  RETURN_IF_ERROR(Mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m"));
  std::string skel = root + "/skel";
  RETURN_IF_ERROR(MkDir(skel));
  for (const char* d : {"tmp", "workspace", "proc", "sys", "dev", "run"}) RETURN_IF_ERROR(MkDir(skel + "/" + d));
  for (size_t i = 0; i < kSystemDirs.size(); ++i) {
    const auto& d = fds.system[i];
    struct stat st;
    if (::fstatat(fds.image.get(), kSystemDirs[i], &st, AT_SYMLINK_NOFOLLOW) == 0) continue;  // the pack's own
    std::string at = skel + "/" + kSystemDirs[i];
    if (!d.link.empty()) {
      if (::symlink(d.link.c_str(), at.c_str()) < 0) return ErrnoStatus("symlink " + at, errno);
    } else if (d.fd.valid()) {
      RETURN_IF_ERROR(MkDir(at));
    }
  }
  for (size_t i = 0; i < cfg.spec.volumes.size(); ++i) {
    const Volume& v = cfg.spec.volumes[i];
    struct stat st;
    if (::fstat(fds.volumes[i].get(), &st) < 0) return ErrnoStatus("stat " + v.host, errno);
    std::string rel = v.guest.substr(1);
    size_t slash = rel.rfind('/');
    if (slash != std::string::npos) RETURN_IF_ERROR(MkDirsAt(skel, rel.substr(0, slash)));
    if (S_ISDIR(st.st_mode)) {
      RETURN_IF_ERROR(MkDir(skel + "/" + rel));
    } else {
      RETURN_IF_ERROR(Touch(skel + "/" + rel));
    }
  }
  if (!UnderDir(cfg.workdir, "/workspace") && !UnderDir(cfg.workdir, "/tmp") && cfg.workdir != "/")
    RETURN_IF_ERROR(MkDirsAt(skel, cfg.workdir.substr(1)));
  // No upperdir: the overlay is read-only.
  std::string opts = "lowerdir=" + skel + ":" + FdPath(fds.image.get());
  return Mount("overlay", root, "overlay", MS_NOSUID | MS_NODEV | MS_RDONLY, opts);
}

}  // namespace

Status BuildRootfs(const SandboxConfig& cfg, const HostFds& fds) {
  RETURN_IF_ERROR(Mount("", "/", nullptr, MS_REC | MS_PRIVATE));
  // Looked up by name below the machine directory so the walk enters the
  // mount placed on it (a /proc/self/fd jump would land under it).
  std::string root = FdPath(fds.root.get()) + "/root";
  const bool pack = !cfg.pack_root.empty();
  const bool image_dir = !pack && !cfg.spec.image.empty();
  if (pack) {
    RETURN_IF_ERROR(PackRoot(cfg, fds, root));
  } else if (image_dir) {
    std::string opts = "lowerdir=" + FdPath(fds.image.get()) + ",upperdir=" + FdPath(fds.upper.get()) +
                       ",workdir=" + FdPath(fds.work.get());
    Status s = Mount("overlay", root, "overlay", MS_NOSUID | MS_NODEV, opts);
    if (!s.ok()) s = Mount("overlay", root, "overlay", MS_NOSUID | MS_NODEV, opts + ",userxattr");
    RETURN_IF_ERROR(s);
  } else {
    RETURN_IF_ERROR(Mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m"));
  }
  // From here on every path is relative to the new root.
  if (::chdir(root.c_str()) < 0) return ErrnoStatus("chdir to the new root", errno);
  if (!image_dir) {
    for (size_t i = 0; i < kSystemDirs.size(); ++i) {
      const auto& d = fds.system[i];
      if (d.link.empty() && !d.fd.valid()) continue;
      std::string name = kSystemDirs[i];
      if (pack) {
        struct stat st;
        if (::fstatat(fds.image.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) continue;
        if (!d.link.empty()) continue;  // the skeleton has the link
      } else if (!d.link.empty()) {
        if (::symlink(d.link.c_str(), name.c_str()) < 0) return ErrnoStatus("symlink " + name, errno);
        continue;
      }
      if (!pack) RETURN_IF_ERROR(MkDir(name));
      RETURN_IF_ERROR(Bind(d.fd.get(), name, /*read_only=*/true));
    }
  }
  // /tmp, /workspace, /sys/fs/cgroup and the CUDA endpoint are mounted later,
  // by the supervisor (InjectGuestMounts), so they stay replaceable for clones.
  if (!pack)
    for (const char* d : {"tmp", "workspace", "proc", "sys", "run"}) RETURN_IF_ERROR(MkDir(d));
  RETURN_IF_ERROR(Mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC));
  RETURN_IF_ERROR(Mount("sysfs", "sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY));
  RETURN_IF_ERROR(SetupDev(pack));
  RETURN_IF_ERROR(Mount("tmpfs", "run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m"));
  RETURN_IF_ERROR(MkDir("run/smolvm"));
  RETURN_IF_ERROR(Bind(fds.run.get(), "run/smolvm", true));
  if (fds.shim.valid()) {
    std::string dst = cfg.spec.cuda ? "run/smolvm/lib" : "run/smolvm/lib/libsmolvm-guest.so";
    RETURN_IF_ERROR(Bind(fds.shim.get(), dst, true));
  }
  if (fds.python.valid()) RETURN_IF_ERROR(Bind(fds.python.get(), "run/smolvm/python", true));
  for (size_t i = 0; i < cfg.spec.volumes.size(); ++i) {
    const Volume& v = cfg.spec.volumes[i];
    std::string dst = v.guest.substr(1);
    struct stat st;
    if (::fstat(fds.volumes[i].get(), &st) < 0) return ErrnoStatus("stat " + v.host, errno);
    if (!pack) {
      size_t slash = dst.rfind('/');
      Status made = slash == std::string::npos ? Status::Ok() : MkDirs(dst.substr(0, slash));
      if (made.ok()) made = S_ISDIR(st.st_mode) ? MkDir(dst) : Touch(dst);
      if (!made.ok())
        return InvalidArgument("volume " + v.host + ":" + v.guest + ": cannot create " + v.guest +
                               " in the guest (" + made.message() + "); mount it under /workspace, /tmp or a new top-level path");
    }
    RETURN_IF_ERROR(Bind(fds.volumes[i].get(), dst, v.read_only));
  }
  if (cfg.spec.cuda && fds.shim.valid()) RETURN_IF_ERROR(CoverMachineCudaLibraries(cfg, pack || image_dir));
  if (::syscall(SYS_pivot_root, ".", ".") < 0) return ErrnoStatus("pivot_root", errno);
  if (::umount2(".", MNT_DETACH) < 0) return ErrnoStatus("detaching the host root", errno);
  if (::chdir("/") < 0) return ErrnoStatus("chdir /", errno);
  if (!image_dir)
    RETURN_IF_ERROR(Mount("", "/", nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV));
  return Status::Ok();
}

}  // namespace smolvm::machine
