#include "worker/module_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "base/sha256.h"
#include "base/unique_fd.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace smolvm {
namespace {

constexpr size_t kWireHashBytes = 16;

Result<std::string> ReadWhole(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return errno == ENOENT ? NotFound("module image not cached") : ErrnoStatus("open " + path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) < 0) return ErrnoStatus("fstat " + path, errno);
  if (!S_ISREG(st.st_mode)) return NotFound("module image not cached");
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  while (true) {
    ssize_t r = ::read(fd.get(), buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus("read " + path, errno);
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  return out;
}

}  // namespace

std::string ModuleHash(std::string_view image) {
  XXH128_hash_t h = XXH3_128bits(image.data(), image.size());
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  return std::string(reinterpret_cast<const char*>(c.digest), sizeof c.digest);
}

Result<std::string> CreateModuleCacheDir(const std::string& prefix) {
  std::string tmpl = prefix + ".XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return ErrnoStatus("create the module cache " + tmpl, errno);
  // mkdtemp made it, 0700; check anyway before anything is trusted to it.
  struct stat st;
  if (::lstat(tmpl.c_str(), &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077)) {
    ::rmdir(tmpl.c_str());
    return Status(Code::kPermissionDenied, "the module cache " + tmpl + " is not a private directory of ours");
  }
  return tmpl;
}

ModuleCache::ModuleCache(std::string dir, uint64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {
  static const bool sha256_ready = !Sha256("").empty();
  (void)sha256_ready;
}

std::string ModuleCache::PathOf(std::string_view sha256) const { return dir_ + "/" + HexOfBytes(sha256); }

std::string ModuleCache::Sha256Of(std::string_view hash) const {
  auto it = index_.find(hash);
  return it == index_.end() ? "" : it->second;
}

Status ModuleCache::Remember(std::string_view hash, std::string_view sha256) {
  if (hash.size() != kWireHashBytes || sha256.size() != kSha256Bytes)
    return InvalidArgument("a module index entry needs a 16-byte hash and a 32-byte SHA-256");
  index_[std::string(hash)] = std::string(sha256);
  return Status::Ok();
}

Result<std::string> ModuleCache::Get(std::string_view hash) {
  if (hash.size() != kWireHashBytes) return InvalidArgument("module hash must be 16 bytes");
  auto it = index_.find(hash);
  if (it == index_.end() || dir_.empty()) return NotFound("module image not cached");
  const std::string path = PathOf(it->second);
  ASSIGN_OR_RETURN(std::string image, ReadWhole(path));
  if (Sha256(image) != it->second) {
    ::unlink(path.c_str());
    return NotFound("the cached module image failed its SHA-256 check (removed; send the image)");
  }
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // recently used
  return image;
}

Status ModuleCache::Put(std::string_view hash, std::string_view image) {
  if (hash.size() != kWireHashBytes) return InvalidArgument("module hash must be 16 bytes");
  if (ModuleHash(image) != hash) return InvalidArgument("module image does not match its hash");
  std::string sha = Sha256(image);
  if (sha.size() != kSha256Bytes) return Internal("SHA-256 failed");
  index_[std::string(hash)] = sha;
  if (dir_.empty() || (max_bytes_ && image.size() > max_bytes_)) return Status::Ok();  // kept in no file
  const std::string path = PathOf(sha);
  if (auto have = ReadWhole(path); have.ok() && Sha256(*have) == sha) {
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
    return Status::Ok();
  }
  std::string tmp = path + ".tmp.XXXXXX";
  UniqueFd fd(::mkostemp(tmp.data(), O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("create " + tmp, errno);
  for (size_t at = 0; at < image.size();) {
    ssize_t w = ::write(fd.get(), image.data() + at, image.size() - at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      Status st = ErrnoStatus("write " + tmp, errno);
      ::unlink(tmp.c_str());
      return st;
    }
    at += static_cast<size_t>(w);
  }
  if (::rename(tmp.c_str(), path.c_str()) < 0) {
    Status st = ErrnoStatus("rename " + tmp, errno);
    ::unlink(tmp.c_str());
    return st;
  }
  Evict();
  return Status::Ok();
}

void ModuleCache::Evict() const { EvictLeastRecentlyUsed({dir_}, max_bytes_); }

void EvictLeastRecentlyUsed(const std::vector<std::string>& dirs, uint64_t max_bytes) {
  if (max_bytes == 0) return;
  struct Entry {
    std::string path;
    uint64_t bytes;
    struct timespec used;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  for (const std::string& dir : dirs) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    while (struct dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.' || std::string_view(e->d_name).find(".tmp.") != std::string_view::npos) continue;
      std::string path = dir + "/" + e->d_name;
      struct stat st;
      if (::lstat(path.c_str(), &st) < 0 || !S_ISREG(st.st_mode)) continue;
      entries.push_back({path, static_cast<uint64_t>(st.st_size), st.st_mtim});
      total += static_cast<uint64_t>(st.st_size);
    }
    ::closedir(d);
  }
  if (total <= max_bytes) return;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.used.tv_sec != b.used.tv_sec ? a.used.tv_sec < b.used.tv_sec : a.used.tv_nsec < b.used.tv_nsec;
  });
  for (const auto& e : entries) {
    if (total <= max_bytes) break;
    if (::unlink(e.path.c_str()) == 0) total -= e.bytes;
  }
}

}  // namespace smolvm
