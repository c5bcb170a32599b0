#include "machine/pack.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <linux/falloc.h>
#include <sched.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/unique_fd.h"
#include "machine/spec.h"

extern char** environ;

namespace smolvm::machine {
namespace {

constexpr const char* kSystemDirNames[] = {"usr", "bin", "sbin", "lib", "lib64", "lib32", "libx32", "etc"};

std::string Hex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

void PutU32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t GetU32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

Result<std::string> Sha256Bytes(const std::string& data, unsigned char out[32]) {
  unsigned int n = 0;
  if (EVP_Digest(data.data(), data.size(), out, &n, EVP_sha256(), nullptr) != 1 || n != 32)
    return Internal("SHA-256 failed (libcrypto)");
  return Hex(out, 32);
}

Status WriteAll(int fd, const void* p, size_t n, uint64_t off) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::pwrite(fd, c, n, static_cast<off_t>(off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return ErrnoStatus("write", errno);
    c += w;
    n -= static_cast<size_t>(w);
    off += static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

Status RunTool(std::vector<std::string> argv, const char* package = "squashfs-tools",
               const char* env = "$SMOLVM_MKSQUASHFS") {
  std::vector<char*> a;
  for (auto& s : argv) a.push_back(s.data());
  a.push_back(nullptr);
  pid_t pid;
  int rc = ::posix_spawnp(&pid, a[0], nullptr, nullptr, a.data(), environ);
  if (rc != 0)
    return Status(Code::kNotFound, "cannot run " + argv[0] + ": " + std::strerror(rc) + " (install " + package +
                                       ", or point " + env + " at it)");
  int status;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return Internal(argv[0] + " failed (its message is above)");
  return Status::Ok();
}

Status CheckDir(const std::string& what, const std::string& path) {
  struct stat st;
  if (path.empty() || ::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return InvalidArgument(what + " '" + path + "' is not a directory");
  return Status::Ok();
}

std::string Basename(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p.substr(p.rfind('/') + 1);
}

}  // namespace

std::string ManifestToJson(const PackManifest& m) {
  nlohmann::json j;
  j["format_version"] = m.format_version;
  j["image"] = {{"type", m.image_type}, {"offset", m.image_offset}, {"size", m.image_size}, {"sha256", m.image_sha256}};
  j["command"] = m.command;
  j["env"] = m.env;
  j["workdir"] = m.workdir;
  j["model"] = m.model;
  j["created_by"] = m.created_by;
  j["created_at"] = m.created_at;
  j["system_dirs"] = m.system_dirs;
  return j.dump(2);
}

Result<PackManifest> ManifestFromJson(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Malformed("pack manifest is not a JSON object");
  PackManifest m;
  try {
    m.format_version = j.at("format_version").get<int>();
    if (m.format_version < 1 || m.format_version > kPackFormatVersion)
      return Malformed("pack format " + std::to_string(m.format_version) + " is newer than this smolvm reads (" +
                       std::to_string(kPackFormatVersion) + "): upgrade smolvm");
    const auto& img = j.at("image");
    m.image_type = img.at("type").get<std::string>();
    m.image_offset = img.at("offset").get<uint64_t>();
    m.image_size = img.at("size").get<uint64_t>();
    m.image_sha256 = img.at("sha256").get<std::string>();
    m.command = j.value("command", std::vector<std::string>{});
    m.env = j.value("env", std::vector<std::string>{});
    m.workdir = j.value("workdir", std::string("/workspace"));
    m.model = j.value("model", std::string());
    m.created_by = j.value("created_by", std::string());
    m.created_at = j.value("created_at", int64_t{0});
    m.system_dirs = j.value("system_dirs", std::vector<std::string>{});
  } catch (const nlohmann::json::exception& e) {
    return Malformed(std::string("pack manifest: ") + e.what());
  }
  if (m.image_type != "erofs" && m.image_type != "squashfs")
    return Malformed("pack image type '" + m.image_type + "' is not supported (erofs, squashfs)");
  if (m.image_sha256.size() != 64) return Malformed("pack manifest: image.sha256 is not a SHA-256");
  if (m.workdir.empty() || m.workdir[0] != '/') return Malformed("pack manifest: workdir must be absolute");
  for (const auto& e : m.env)
    if (!ValidateEnv(e).ok()) return Malformed("pack manifest: env entry '" + e + "' is not KEY=VALUE");
  return m;
}

Result<std::string> Sha256Range(int fd, uint64_t offset, uint64_t len) {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) return Internal("SHA-256 init failed (libcrypto)");
  ::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(len), POSIX_FADV_SEQUENTIAL);
  std::vector<char> buf(4 << 20);
  while (len > 0) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(len, buf.size()));
    ssize_t r = ::pread(fd, buf.data(), want, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus("read", errno);
    if (r == 0) return Malformed("pack is truncated");
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(r));
    offset += static_cast<uint64_t>(r);
    len -= static_cast<uint64_t>(r);
  }
  unsigned char out[32];
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx.get(), out, &n) != 1 || n != 32) return Internal("SHA-256 failed (libcrypto)");
  return Hex(out, 32);
}

bool IsPackFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

namespace {

Result<PackManifest> ReadPackFd(const std::string& path, int fd) {
  auto bad = [&](const std::string& why) { return Malformed("pack '" + path + "' is not usable: " + why); };
  unsigned char h[kPackHeaderSize];
  ssize_t n = ::pread(fd, h, sizeof h, 0);
  if (n != static_cast<ssize_t>(sizeof h)) return bad("shorter than its header (truncated?)");
  if (std::memcmp(h, kPackMagic, sizeof kPackMagic) != 0) return bad("not a .smolmachine file (bad magic)");
  uint32_t version = GetU32(h + 8), msize = GetU32(h + 12);
  if (version < 1 || version > kPackHeaderVersion)
    return bad("header version " + std::to_string(version) + " is newer than this smolvm reads: upgrade smolvm");
  if (msize == 0 || msize > kPackManifestMax) return bad("manifest size " + std::to_string(msize) + " out of range");
  std::string text(msize, '\0');
  if (::pread(fd, text.data(), msize, kPackHeaderSize) != static_cast<ssize_t>(msize)) return bad("truncated manifest");
  unsigned char digest[32];
  ASSIGN_OR_RETURN(std::string hex, Sha256Bytes(text, digest));
  (void)hex;
  if (std::memcmp(digest, h + 16, 32) != 0) return bad("its manifest does not match the header's digest (corrupt)");
  auto m = ManifestFromJson(text);
  if (!m.ok()) return bad(m.status().message());
  if (m->image_offset % kPackAlign != 0 || m->image_offset < kPackHeaderSize + msize)
    return bad("image offset " + std::to_string(m->image_offset) + " is not 4 KiB-aligned after the manifest");
  struct stat st;
  if (::fstat(fd, &st) < 0) return ErrnoStatus("stat " + path, errno);
  uint64_t want = m->image_offset + m->image_size;
  if (static_cast<uint64_t>(st.st_size) != want)
    return bad("file is " + std::to_string(st.st_size) + " bytes, its manifest says " + std::to_string(want) +
               (static_cast<uint64_t>(st.st_size) < want ? " (truncated)" : " (trailing bytes)"));
  return m;
}

}  // namespace

Result<PackManifest> ReadPack(const std::string& path, int fd_in) {
  if (fd_in >= 0) return ReadPackFd(path, fd_in);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status(Code::kInvalidArgument, "cannot open pack '" + path + "': " + std::strerror(errno));
  return ReadPackFd(path, fd.get());
}

Result<PackManifest> VerifyPack(const std::string& path, int fd_in) {
  UniqueFd own;
  int fd = fd_in;
  if (fd < 0) {
    own.Reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!own.valid()) return Status(Code::kInvalidArgument, "cannot open pack '" + path + "': " + std::strerror(errno));
    fd = own.get();
  }
  ASSIGN_OR_RETURN(PackManifest m, ReadPackFd(path, fd));
  ASSIGN_OR_RETURN(std::string got, Sha256Range(fd, m.image_offset, m.image_size));
  if (got != m.image_sha256)
    return Malformed("pack '" + path + "' is corrupt: its image's SHA-256 is " + got + ", the manifest says " +
                     m.image_sha256 + " (make it again with 'smolvm pack create')");
  return m;
}

namespace {

// mksquashfs writes the image at the offset itself and takes every source,
// each landing at the root under its basename (one source keeps its name
// only with -keep-as-directory).
Status BuildSquashfs(const PackCreateOptions& o, const std::vector<std::string>& sources, const std::string& tmp) {
  std::vector<std::string> argv = {o.mksquashfs};
  argv.insert(argv.end(), sources.begin(), sources.end());
  argv.push_back(tmp);
  for (const char* a : {"-noappend", "-quiet", "-no-progress", "-comp", "lz4", "-all-root", "-no-xattrs", "-offset"})
    argv.push_back(a);
  argv.push_back(std::to_string(kPackImageOffset));
  if (sources.size() == 1) argv.push_back("-keep-as-directory");
  return RunTool(argv);
}

// Shifts the image that starts at byte 0 of `tmp` to kPackImageOffset,
// leaving room for header and manifest: FALLOC_FL_INSERT_RANGE moves only
// extents (ext4, xfs); elsewhere (tmpfs, btrfs, overlayfs over them) the image
// is copied into a fresh file (copy_file_range, else read/write), each
// copied range punched out of the source so the disk holds ~one image, not
// two, while it runs.
Status MoveToImageOffset(const std::string& tmp) {
  UniqueFd src(::open(tmp.c_str(), O_RDWR | O_CLOEXEC));
  if (!src.valid()) return ErrnoStatus("open " + tmp, errno);
  if (::fallocate(src.get(), FALLOC_FL_INSERT_RANGE, 0, static_cast<off_t>(kPackImageOffset)) == 0) return Status::Ok();
  struct stat st;
  if (::fstat(src.get(), &st) < 0) return ErrnoStatus("stat " + tmp, errno);
  std::string shifted = tmp + ".shift";
  UniqueFd dst(::open(shifted.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!dst.valid()) return ErrnoStatus("create " + shifted, errno);
  auto fail = [&](Status s) {
    ::unlink(shifted.c_str());
    return s;
  };
  loff_t in = 0, out = static_cast<loff_t>(kPackImageOffset);
  bool kernel_copy = true;
  std::vector<char> buf;
  while (in < st.st_size) {
    size_t want = static_cast<size_t>(std::min<loff_t>(st.st_size - in, 64 << 20));
    ssize_t n = -1;
    const loff_t from = in;
    if (kernel_copy) {
      n = ::copy_file_range(src.get(), &in, dst.get(), &out, want, 0);
      if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP || errno == ENOSYS)) {
        kernel_copy = false;
        continue;
      }
    } else {
      buf.resize(4 << 20);
      n = ::pread(src.get(), buf.data(), std::min(want, buf.size()), in);
      if (n > 0) {
        Status w = WriteAll(dst.get(), buf.data(), static_cast<size_t>(n), static_cast<uint64_t>(out));
        if (!w.ok()) return fail(w);
        in += n;
        out += n;
      }
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(ErrnoStatus("copy the image into " + shifted, errno));
    if (n == 0) return fail(Internal("the image " + tmp + " shrank while being copied"));
    // Best effort: without hole punching the copy just needs the space.
    (void)::fallocate(src.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, from, n);
  }
  if (::rename(shifted.c_str(), tmp.c_str()) < 0) return fail(ErrnoStatus("rename " + shifted, errno));
  return Status::Ok();
}

[[noreturn]] void ChildDie(const char* what, const std::string& path) {
  int e = errno;
  std::string msg = std::string("smolvm pack create: ") + what + " " + path + ": " + std::strerror(e) + "\n";
  if (::write(2, msg.data(), msg.size()) < 0) {
  }
  ::_exit(126);
}

// Child of BuildErofs, between fork and exec, on strings the parent built.
// Exit 127: the tool is missing; 126: staging failed (said on stderr).
[[noreturn]] void ErofsChild(const std::vector<std::string>& sources, const std::vector<std::string>& at,
                             const std::string& stage, char* const* argv, const std::string& uid_map,
                             const std::string& gid_map) {
  auto die = ChildDie;
  auto write_file = [&](const char* path, const std::string& text) {
    UniqueFd f(::open(path, O_WRONLY | O_CLOEXEC));
    if (!f.valid() || ::write(f.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
      die("write", path);
  };
  // Unprivileged: a user namespace mapping the caller to root, for the mounts.
  int flags = CLONE_NEWNS | (uid_map.empty() ? 0 : CLONE_NEWUSER);
  if (::unshare(flags) < 0) die("unshare", "(mount namespace)");
  if (!uid_map.empty()) {
    write_file("/proc/self/setgroups", "deny");
    write_file("/proc/self/uid_map", uid_map);
    write_file("/proc/self/gid_map", gid_map);
  }
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) < 0) die("make private", "/");
  if (::mount("smolvm-pack-stage", stage.c_str(), "tmpfs", MS_NOSUID, "mode=0755,size=1m") < 0)
    die("mount tmpfs on", stage);
  for (size_t i = 0; i < sources.size(); ++i) {
    struct stat st;
    const char* src = sources[i].c_str();
    const char* dst = at[i].c_str();
    if (::lstat(src, &st) < 0) die("stat", sources[i]);
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      ssize_t n = ::readlink(src, target, sizeof target - 1);
      if (n < 0) die("readlink", sources[i]);
      target[n] = '\0';
      if (::symlink(target, dst) < 0) die("symlink", at[i]);
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      if (::mkdir(dst, 0755) < 0) die("mkdir", at[i]);
    } else if (S_ISREG(st.st_mode)) {
      UniqueFd f(::open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
      if (!f.valid()) die("create", at[i]);
    } else {
      if (::mknod(dst, st.st_mode, st.st_rdev) < 0) die("mknod", at[i]);
      continue;
    }
    if (::mount(src, dst, nullptr, MS_BIND | MS_REC, nullptr) < 0) die("bind-mount", sources[i]);
  }
  ::execvp(argv[0], argv);
  if (errno == ENOENT) ::_exit(127);
  ChildDie("exec", argv[0]);  // not die: a pointer keeps no [[noreturn]]
}

// mkfs.erofs 1.5 reads one directory and writes at offset 0: stage the
// sources as one tree (bind mounts in a private namespace, gone with it),
// then move the image to the offset.
Status BuildErofsStaged(const PackCreateOptions& o, const std::vector<std::string>& sources,
                        const std::vector<std::string>& names, const std::string& tmp) {
  std::string stage = o.out + ".stage." + std::to_string(::getpid());
  if (::mkdir(stage.c_str(), 0700) < 0) return ErrnoStatus("mkdir " + stage, errno);
  std::vector<std::string> at;
  for (const auto& n : names) at.push_back(stage + "/" + n);
  std::vector<std::string> args = {o.mkfs_erofs, "--quiet", "--all-root", "-x-1", tmp, stage};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string uid_map, gid_map;
  if (::geteuid() != 0) {
    uid_map = "0 " + std::to_string(::geteuid()) + " 1";
    gid_map = "0 " + std::to_string(::getegid()) + " 1";
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::rmdir(stage.c_str());
    return ErrnoStatus("fork", e);
  }
  if (pid == 0) ErofsChild(sources, at, stage, argv.data(), uid_map, gid_map);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ::rmdir(stage.c_str());  // its tmpfs went with the child's namespace
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
    return Status(Code::kNotFound, "cannot run " + o.mkfs_erofs +
                                       " (install erofs-utils, or point $SMOLVM_MKFS_EROFS at mkfs.erofs)");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 126) return Internal("staging the pack's tree failed (see above)");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return Internal(o.mkfs_erofs + " failed (its message is above)");
  return MoveToImageOffset(tmp);
}

// A source in another mount namespace (a running machine's /workspace,
// reached through /proc/PID/root) cannot be bind-mounted from here (EINVAL,
// open_tree too): it is copied next to the output first, and the copy goes
// when the image is made.
Status BuildErofs(const PackCreateOptions& o, std::vector<std::string> sources, const std::vector<std::string>& names,
                  const std::string& tmp) {
  namespace fs = std::filesystem;
  std::string copies = o.out + ".copy." + std::to_string(::getpid());
  Status s = Status::Ok();
  for (size_t i = 0; i < sources.size() && s.ok(); ++i) {
    if (sources[i].rfind("/proc/", 0) != 0) continue;
    std::error_code ec;
    fs::create_directories(copies, ec);
    std::string to = copies + "/" + names[i];
    if (!ec) fs::copy(sources[i], to, fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
    if (ec) s = Status(Code::kIo, "copy " + sources[i] + " to " + to + ": " + ec.message());
    sources[i] = to;
  }
  if (s.ok()) s = BuildErofsStaged(o, sources, names, tmp);
  std::error_code ec;
  fs::remove_all(copies, ec);
  return s;
}

}  // namespace

Result<PackManifest> CreatePack(const PackCreateOptions& o) {
  if (!o.from.empty()) RETURN_IF_ERROR(CheckDir("--from", o.from));
  if (!o.model.empty()) RETURN_IF_ERROR(CheckDir("--model", o.model));
  if (o.out.empty()) return InvalidArgument("give the output file with -o FILE.smolmachine");
  if (o.workdir.empty() || o.workdir[0] != '/') return InvalidArgument("--workdir '" + o.workdir + "' must be absolute");
  for (const auto& e : o.env) RETURN_IF_ERROR(ValidateEnv(e));
  if (o.image_type != "erofs" && o.image_type != "squashfs")
    return InvalidArgument("image type '" + o.image_type + "' is not one of erofs, squashfs");
  PackManifest m;
  m.image_type = o.image_type;
  m.format_version = o.image_type == "squashfs" ? 1 : 2;
  m.command = o.command;
  m.env = o.env;
  m.workdir = o.workdir;
  m.created_by = o.created_by;
  m.created_at = static_cast<int64_t>(::time(nullptr));
  // Every entry of --from is a source of its own (so it lands at the root
  // under its name), then the model and the extras under their basenames.
  std::vector<std::string> sources;
  std::vector<std::string> names;
  if (!o.from.empty()) {
    std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(o.from.c_str()), ::closedir);
    if (!d) return ErrnoStatus("open " + o.from, errno);
    while (struct dirent* e = ::readdir(d.get())) {
      std::string n = e->d_name;
      if (n == "." || n == ".." || std::find(o.exclude.begin(), o.exclude.end(), n) != o.exclude.end()) continue;
      sources.push_back(o.from + "/" + n);
      names.push_back(n);
    }
  }
  auto add = [&](const std::string& path) -> Status {
    std::string n = Basename(path);
    if (std::find(names.begin(), names.end(), n) != names.end())
      return InvalidArgument("'" + path + "' would land at /" + n + ", which --from already has");
    sources.push_back(path);
    names.push_back(n);
    return Status::Ok();
  };
  if (!o.model.empty()) {
    RETURN_IF_ERROR(add(o.model));
    m.model = "/" + Basename(o.model);
  } else {
    m.model = o.model_inside;
  }
  for (const auto& x : o.extra_sources) RETURN_IF_ERROR(add(x));
  if (sources.empty()) return InvalidArgument("nothing to pack: --from '" + o.from + "' is empty and there is no --model");
  for (const char* d : kSystemDirNames)
    if (std::find(names.begin(), names.end(), d) != names.end()) m.system_dirs.push_back(d);
  std::sort(m.system_dirs.begin(), m.system_dirs.end());

  std::string tmp = o.out + ".tmp." + std::to_string(::getpid());
  auto fail = [&](Status s) -> Status {
    ::unlink(tmp.c_str());
    return s;
  };
  Status s = o.image_type == "erofs" ? BuildErofs(o, sources, names, tmp) : BuildSquashfs(o, sources, tmp);
  if (!s.ok()) return fail(s);
  UniqueFd fd(::open(tmp.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return fail(ErrnoStatus("open " + tmp, errno));
  struct stat st;
  if (::fstat(fd.get(), &st) < 0) return fail(ErrnoStatus("stat " + tmp, errno));
  if (static_cast<uint64_t>(st.st_size) <= kPackImageOffset) return fail(Internal("mksquashfs wrote no image"));
  m.image_offset = kPackImageOffset;
  m.image_size = static_cast<uint64_t>(st.st_size) - kPackImageOffset;
  auto sha = Sha256Range(fd.get(), m.image_offset, m.image_size);
  if (!sha.ok()) return fail(sha.status());
  m.image_sha256 = *sha;
  std::string text = ManifestToJson(m);
  if (text.size() > kPackManifestMax)
    return fail(InvalidArgument("the manifest is " + std::to_string(text.size()) + " bytes, more than " +
                                std::to_string(kPackManifestMax) + " (shorten the command or env)"));
  unsigned char h[kPackHeaderSize] = {};
  std::memcpy(h, kPackMagic, sizeof kPackMagic);
  PutU32(h + 8, kPackHeaderVersion);
  PutU32(h + 12, static_cast<uint32_t>(text.size()));
  auto md = Sha256Bytes(text, h + 16);
  if (!md.ok()) return fail(md.status());
  s = WriteAll(fd.get(), h, sizeof h, 0);
  if (s.ok()) s = WriteAll(fd.get(), text.data(), text.size(), kPackHeaderSize);
  if (s.ok() && ::fsync(fd.get()) < 0) s = ErrnoStatus("fsync " + tmp, errno);
  if (s.ok() && ::fchmod(fd.get(), 0644) < 0) s = ErrnoStatus("chmod " + tmp, errno);
  if (s.ok() && ::rename(tmp.c_str(), o.out.c_str()) < 0) s = ErrnoStatus("rename to " + o.out, errno);
  if (!s.ok()) return fail(s);
  return m;
}

}  // namespace smolvm::machine
