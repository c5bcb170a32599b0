#include "base/sha256.h"

#include "base/hex.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <memory>

#include "base/unique_fd.h"

namespace smolvm {
namespace {

struct CtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

}  // namespace

std::string Sha256(std::string_view data) {
  unsigned char md[kSha256Bytes];
  unsigned int n = 0;
  // One-shot EVP digest; with SHA-256 it fails only on allocation failure.
  if (EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr) != 1 || n != kSha256Bytes) return "";
  return std::string(reinterpret_cast<const char*>(md), kSha256Bytes);
}

std::string Sha256Hex(std::string_view data) { return HexOfBytes(Sha256(data)); }

Result<std::string> Sha256File(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + path, errno);
  std::unique_ptr<EVP_MD_CTX, CtxFree> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) return Internal("SHA-256 init failed");
  std::string buf(1 << 20, '\0');
  while (true) {
    ssize_t r = ::read(fd.get(), buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus("read " + path, errno);
    if (r == 0) break;
    if (EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(r)) != 1) return Internal("SHA-256 update failed");
  }
  unsigned char md[kSha256Bytes];
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx.get(), md, &n) != 1 || n != kSha256Bytes) return Internal("SHA-256 final failed");
  return HexOfBytes(std::string_view(reinterpret_cast<const char*>(md), n));
}

}  // namespace smolvm
