#include "machine/pack_mount.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/unique_fd.h"
#include "machine/paths.h"

namespace smolvm::machine {
namespace {

bool IsMounted(const std::string& mp) {
  struct stat a, b;
  if (::stat(mp.c_str(), &a) != 0 || ::stat((mp + "/..").c_str(), &b) != 0) return false;
  return a.st_dev != b.st_dev;
}

// Holds $SMOLVM_HOME/packs/.lock for its lifetime.
class PackLock {
 public:
  static Result<PackLock> Take(const std::string& home) {
    if (Status st = MakeHome(home); !st.ok()) return Status(st.code(), "$SMOLVM_HOME: " + st.message());
    RETURN_IF_ERROR(MakePrivateDir(home + "/packs"));
    PackLock l;
    l.fd_.Reset(::open((home + "/packs/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!l.fd_.valid()) return ErrnoStatus("open " + home + "/packs/.lock", errno);
    while (::flock(l.fd_.get(), LOCK_EX) < 0)
      if (errno != EINTR) return ErrnoStatus("flock packs/.lock", errno);
    return l;
  }

 private:
  UniqueFd fd_;
};

// How a pack's loop device reads the file. 4 MiB readahead, set every time
// (a loop device keeps the last user's setting): a cold mmap of weights
// through a 128 KiB window ran 10x slower (docs/machines.md, "Reading
// speed"). erofs packs: direct I/O, so the pack's bytes are cached once (as
// the image's files), not twice (also as the pack file's pages);
// $SMOLVM_PACK_LOOP=buffered turns it off (the bench's A/B). squashfs
// (format 1) packs keep buffered I/O.
constexpr unsigned long kPackReadaheadSectors = (4 << 20) / 512;

bool PackLoopDirectIo(const PackManifest& m) {
  const char* v = std::getenv("SMOLVM_PACK_LOOP");
  return m.image_type == "erofs" && !(v != nullptr && std::strcmp(v, "buffered") == 0);
}

// Attaches a read-only, autoclear loop device over [offset, offset+size) of
// file_fd and mounts the image (its manifest's type) at mp. The loop device
// lives exactly as long as the mount (or until this returns, on failure).
Status MountImage(int file_fd, const PackManifest& m, const std::string& mp) {
  UniqueFd ctl(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!ctl.valid()) return ErrnoStatus("open /dev/loop-control (is the loop module loaded?)", errno);
  for (int attempt = 0; attempt < 16; ++attempt) {
    int n = ::ioctl(ctl.get(), LOOP_CTL_GET_FREE);
    if (n < 0) return ErrnoStatus("LOOP_CTL_GET_FREE", errno);
    std::string dev = "/dev/loop" + std::to_string(n);
    UniqueFd loop(::open(dev.c_str(), O_RDWR | O_CLOEXEC));
    if (!loop.valid() && errno == ENOENT) {
      // A /dev without devtmpfs (some containers) lacks nodes past loop7.
      if (::mknod(dev.c_str(), S_IFBLK | 0600, makedev(7, static_cast<unsigned>(n))) < 0 && errno != EEXIST)
        return ErrnoStatus("mknod " + dev, errno);
      loop.Reset(::open(dev.c_str(), O_RDWR | O_CLOEXEC));
    }
    if (!loop.valid()) return ErrnoStatus("open " + dev, errno);
    struct loop_config cfg;
    std::memset(&cfg, 0, sizeof cfg);
    cfg.fd = static_cast<uint32_t>(file_fd);
    cfg.info.lo_offset = m.image_offset;
    cfg.info.lo_sizelimit = m.image_size;
    cfg.info.lo_flags = LO_FLAGS_READ_ONLY | LO_FLAGS_AUTOCLEAR;
    const bool dio = PackLoopDirectIo(m);
    if (dio) cfg.info.lo_flags |= LO_FLAGS_DIRECT_IO;
    int rc = ::ioctl(loop.get(), LOOP_CONFIGURE, &cfg);
    if (rc < 0 && errno == EINVAL && dio) {  // a backing file without direct I/O: buffered
      cfg.info.lo_flags &= ~static_cast<uint32_t>(LO_FLAGS_DIRECT_IO);
      rc = ::ioctl(loop.get(), LOOP_CONFIGURE, &cfg);
    }
    if (rc < 0) {
      if (errno == EBUSY) continue;  // taken between GET_FREE and CONFIGURE
      return ErrnoStatus("LOOP_CONFIGURE " + dev, errno);
    }
    if (::ioctl(loop.get(), BLKRASET, kPackReadaheadSectors) < 0)
      return ErrnoStatus("set readahead of " + dev, errno);
    if (::mount(dev.c_str(), mp.c_str(), m.image_type.c_str(), MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) < 0) {
      int e = errno;
      return ErrnoStatus("mount the pack's " + m.image_type + " image (" + dev + ") on " + mp +
                             (e == ENODEV ? " (this kernel lacks " + m.image_type + ": remake the pack with --fs " +
                                                (m.image_type == "erofs" ? "squashfs" : "erofs") + ")"
                                          : ""),
                         e);
    }
    return Status::Ok();  // closing `loop` leaves the mount holding the device
  }
  return Unavailable("no free loop device (16 attempts)");
}

std::string VerifiedEntry(const std::string& home, const struct stat& st) {
  auto ns = [](const struct timespec& t) { return std::to_string(t.tv_sec) + "." + std::to_string(t.tv_nsec); };
  return home + "/packs/.verified/" + std::to_string(st.st_dev) + "-" + std::to_string(st.st_ino) + "-" +
         std::to_string(st.st_size) + "-" + ns(st.st_mtim) + "-" + ns(st.st_ctim);
}

std::string Slurp(const std::string& path) {
  UniqueFd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  char buf[128];
  ssize_t n = f.valid() ? ::read(f.get(), buf, sizeof buf) : -1;
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Records that the file `st` describes holds an image with this digest,
// replacing what was recorded for earlier versions of the same file.
void RecordVerified(const std::string& home, const struct stat& st, const std::string& digest) {
  std::string dir = home + "/packs/.verified";
  std::error_code ec;
  if (!MakeHome(home).ok() || !MakePrivateDir(home + "/packs").ok()) return;
  if (::mkdir(dir.c_str(), 0700) < 0 && errno != EEXIST) return;
  std::string entry = VerifiedEntry(home, st);
  std::string prefix = std::to_string(st.st_dev) + "-" + std::to_string(st.st_ino) + "-";
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove(e.path(), ec);
  std::string tmp = entry + ".tmp." + std::to_string(::getpid());
  UniqueFd f(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (f.valid() && ::write(f.get(), digest.data(), digest.size()) == static_cast<ssize_t>(digest.size()) &&
      ::rename(tmp.c_str(), entry.c_str()) == 0)
    return;
  ::unlink(tmp.c_str());  // best effort: the next use hashes again
}

}  // namespace

Result<PackManifest> VerifyPackForUse(const std::string& home, const std::string& file, int fd_in, bool* rehashed) {
  UniqueFd own;
  int fd = fd_in;
  if (fd < 0) {
    own.Reset(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    if (!own.valid()) return InvalidArgument("cannot open pack '" + file + "': " + std::strerror(errno));
    fd = own.get();
  }
  struct stat st;
  if (::fstat(fd, &st) < 0) return ErrnoStatus("stat " + file, errno);
  if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
    return InvalidArgument("pack '" + file + "' is owned by uid " + std::to_string(st.st_uid) + " with mode " + mode +
                           ": anyone but root who can write it could change what the kernel reads after the "
                           "digest check (chown root and chmod go-w it)");
  }
  ASSIGN_OR_RETURN(PackManifest m, ReadPack(file, fd));
  if (Slurp(VerifiedEntry(home, st)) == m.image_sha256) {
    if (rehashed != nullptr) *rehashed = false;
    return m;
  }
  ASSIGN_OR_RETURN(m, VerifyPack(file, fd));
  RecordVerified(home, st, m.image_sha256);
  if (rehashed != nullptr) *rehashed = true;
  return m;
}

std::string PackMountPoint(const std::string& home, const std::string& digest) {
  return home + "/packs/" + digest.substr(0, 32);
}

Result<MountedPack> AcquirePack(Store& store, const std::string& home, const std::string& machine,
                                const std::string& file) {
  ASSIGN_OR_RETURN(PackLock lock, PackLock::Take(home));
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return InvalidArgument("cannot open pack '" + file + "': " + std::strerror(errno));
  ASSIGN_OR_RETURN(PackManifest m, ReadPack(file));
  MountedPack out;
  out.mount_point = PackMountPoint(home, m.image_sha256);
  out.manifest = m;
  if (!IsMounted(out.mount_point)) {
    // Verified through fd, which the loop device then reads.
    ASSIGN_OR_RETURN(out.manifest, VerifyPackForUse(home, file, fd.get()));
    if (::mkdir(out.mount_point.c_str(), 0755) < 0 && errno != EEXIST)
      return ErrnoStatus("mkdir " + out.mount_point, errno);
    Status s = MountImage(fd.get(), out.manifest, out.mount_point);
    if (!s.ok()) {
      ::rmdir(out.mount_point.c_str());
      return s;
    }
  }
  Status s = store.Transaction([&] { return store.AddPackUser(machine, m.image_sha256); });
  if (!s.ok()) {
    auto users = store.PackUsers(m.image_sha256);
    if (users.ok() && *users == 0 && ::umount2(out.mount_point.c_str(), 0) == 0) ::rmdir(out.mount_point.c_str());
    return s;
  }
  return out;
}

Status ReleasePack(Store& store, const std::string& home, const std::string& machine) {
  ASSIGN_OR_RETURN(PackLock lock, PackLock::Take(home));
  std::string digest;
  int64_t left = 0;
  RETURN_IF_ERROR(store.Transaction([&]() -> Status {
    ASSIGN_OR_RETURN(digest, store.PackOf(machine));
    if (digest.empty()) return Status::Ok();
    RETURN_IF_ERROR(store.DropPackUser(machine));
    ASSIGN_OR_RETURN(left, store.PackUsers(digest));
    return Status::Ok();
  }));
  if (digest.empty() || left > 0) return Status::Ok();
  std::string mp = PackMountPoint(home, digest);
  if (IsMounted(mp) && ::umount2(mp.c_str(), 0) < 0) {
    // Still busy (a process that outlived its machine): detach it; the loop
    // device goes when the last reference does.
    if (errno != EBUSY || ::umount2(mp.c_str(), MNT_DETACH) < 0) return ErrnoStatus("umount " + mp, errno);
  }
  ::rmdir(mp.c_str());
  return Status::Ok();
}

}  // namespace smolvm::machine
