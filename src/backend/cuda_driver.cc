#include "backend/cuda_driver.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include "backend/path_env.h"

namespace smolvm {
namespace {

constexpr char kShimMarker[] = ".smolvm-shim";
constexpr char kSoname[] = "libcuda.so.1";

bool IsShimDir(const std::string& dir) { return Exists(dir + "/" + kShimMarker); }

}  // namespace

LibcudaSearch LibcudaSearch::FromEnvironment() {
  LibcudaSearch s;
  s.override_path = Env("SMOLVM_LIBCUDA");
  s.ld_library_path = Env("LD_LIBRARY_PATH");
  return s;
}

// glibc's cache, new format (elf/cache.c, sysdeps/generic/dl-cache.h):
//   header (48 bytes): "glibc-ld.so.cache" "1.1" u32 nlibs, u32 len_strings,
//                      u8 flags, u8 pad[3], u32 extension_offset, u32 unused[3]
//   nlibs entries (24 bytes): i32 flags, u32 key, u32 value, u32 osversion, u64 hwcap
// key and value are offsets of NUL-terminated strings from the header's start
// (an old-format table may precede the header; the offsets ignore it).
std::vector<std::string> LdSoCacheLookup(const std::string& cache_path, std::string_view soname) {
  std::vector<std::string> out;
  std::ifstream in(cache_path, std::ios::binary);
  if (!in) return out;
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  static constexpr std::string_view kMagic = "glibc-ld.so.cache1.1";
  size_t base = data.find(kMagic);
  constexpr size_t kHeader = 48, kEntry = 24;
  if (base == std::string::npos || data.size() < base + kHeader) return out;
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, data.data() + at, 4);
    return v;
  };
  auto str = [&](uint32_t off) -> std::string_view {
    size_t at = base + off;
    if (at >= data.size()) return {};
    size_t end = data.find('\0', at);
    if (end == std::string::npos) return {};
    return std::string_view(data).substr(at, end - at);
  };
  uint32_t nlibs = u32(base + 20);
  for (uint32_t i = 0; i < nlibs; ++i) {
    size_t e = base + kHeader + size_t{i} * kEntry;
    if (e + kEntry > data.size()) break;
    if (str(u32(e + 4)) == soname) {
      std::string_view value = str(u32(e + 8));
      if (!value.empty()) out.emplace_back(value);
    }
  }
  return out;
}

std::vector<std::string> LibcudaCandidates(const LibcudaSearch& search) {
  std::vector<std::string> out;
  auto add = [&](const std::string& file) {
    if (!IsShimDir(DirOf(file))) out.push_back(file);
  };
  size_t start = 0;
  const std::string& lp = search.ld_library_path;
  while (start <= lp.size()) {
    size_t end = lp.find(':', start);
    if (end == std::string::npos) end = lp.size();
    std::string dir = lp.substr(start, end - start);
    if (!dir.empty()) add(dir + "/" + kSoname);
    start = end + 1;
  }
  for (const std::string& p : LdSoCacheLookup(search.ld_so_cache, kSoname)) add(p);
  for (const std::string& dir : search.system_dirs) add(dir + "/" + kSoname);
  return out;
}

Result<std::string> FindLibcuda(const LibcudaSearch& search) {
  if (!search.override_path.empty()) {
    if (!Exists(search.override_path)) {
      return Unavailable("SMOLVM_LIBCUDA=" + search.override_path + " does not exist");
    }
    return search.override_path;
  }
  std::vector<std::string> candidates = LibcudaCandidates(search);
  for (const std::string& c : candidates) {
    if (Exists(c)) return c;
  }
  std::string tried;
  for (const std::string& c : candidates) tried += (tried.empty() ? "" : ", ") + c;
  return Unavailable(std::string(kSoname) + " (the NVIDIA driver) not found; tried " + tried +
                     "; set SMOLVM_LIBCUDA to its path");
}

Result<std::unique_ptr<CudaDriver>> CudaDriver::Load(const LibcudaSearch& search) {
  ASSIGN_OR_RETURN(std::string path, FindLibcuda(search));
  void* dl = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (dl == nullptr) {
    const char* err = ::dlerror();
    return Unavailable("dlopen " + path + ": " + (err ? err : "unknown error"));
  }
  std::unique_ptr<CudaDriver> d(new CudaDriver());
  d->path_ = path;
  d->dl_ = dl;

  using GetProc =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(::dlsym(dl, "cuGetProcAddress_v2"));
  std::string missing;
  // The exported symbol cuda.h names (cuMemcpyHtoDAsync_v2, cuCtxSynchronize)
  // has exactly the prototype the header declares. cuGetProcAddress at
  // CUDA_VERSION may hand back a newer ABI under the same name
  // (cuCtxSynchronize at 13000 takes a CUcontext), so it is only the fallback.
  auto resolve = [&](const char* base, const char* versioned) -> void* {
    void* fn = ::dlsym(dl, versioned);
    if (fn == nullptr && get_proc != nullptr) {
      CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
      if (get_proc(base, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found) !=
              CUDA_SUCCESS ||
          found != CU_GET_PROC_ADDRESS_SUCCESS) {
        fn = nullptr;
      }
    }
    if (fn == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(versioned);
    return fn;
  };
  // #api is the name as written (cuMemcpyHtoDAsync); SMOLVM_XSTR(api) is what
  // cuda.h's macros turn it into (cuMemcpyHtoDAsync_v2).
#define SMOLVM_STR(x) #x
#define SMOLVM_XSTR(x) SMOLVM_STR(x)
#define SMOLVM_CUDA_DRIVER_RESOLVE(api) \
  d->api = reinterpret_cast<decltype(d->api)>(resolve(#api, SMOLVM_XSTR(api)));
  SMOLVM_CUDA_DRIVER_FNS(SMOLVM_CUDA_DRIVER_RESOLVE)
#undef SMOLVM_CUDA_DRIVER_RESOLVE
#undef SMOLVM_XSTR
#undef SMOLVM_STR
  if (!missing.empty()) {
    return Unavailable(path + " lacks driver entry points " + missing +
                       " (driver older than CUDA " + std::to_string(CUDA_VERSION / 1000) + "?)");
  }
  return d;
}

CudaDriver::~CudaDriver() {
  // libcuda is never unloaded: its threads and atexit handlers outlive us.
  (void)dl_;
}

Status CudaDriver::Check(CUresult r, const char* call) const {
  if (r == CUDA_SUCCESS) return Status::Ok();
  const char* name = nullptr;
  if (cuGetErrorName == nullptr || cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) {
    name = "CUDA_ERROR_UNKNOWN_CODE";
  }
  return Status(static_cast<int32_t>(r), std::string(call) + ": " + name);
}

}  // namespace smolvm
