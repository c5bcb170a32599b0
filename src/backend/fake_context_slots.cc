#include "backend/fake_context_slots.h"

#include <cuda.h>
#include <fcntl.h>
#include <sys/file.h>

#include <cerrno>
#include <cstdlib>

namespace smolvm {

Result<UniqueFd> TakeFakeContextSlot(const char* spec) {
  if (spec == nullptr || spec[0] == '\0') return UniqueFd();
  char* end = nullptr;
  errno = 0;
  const long slots = std::strtol(spec, &end, 10);
  if (errno != 0 || end == spec || *end != ':' || slots < 0 || slots > 4096 || end[1] == '\0')
    return InvalidArgument(std::string("SMOLVM_FAKE_CONTEXTS='") + spec + "': use N:DIR (N from 0 to 4096)");
  const std::string dir = end + 1;
  for (long k = 0; k < slots; ++k) {
    const std::string path = dir + "/ctx" + std::to_string(k);
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666));
    if (!fd.valid()) return ErrnoStatus("open " + path, errno);
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) return fd;
    if (errno != EWOULDBLOCK) return ErrnoStatus("flock " + path, errno);
  }
  return Status(CUDA_ERROR_OUT_OF_MEMORY, "no room for a context on the fake device (all " + std::to_string(slots) +
                                              " of SMOLVM_FAKE_CONTEXTS are held)");
}

}  // namespace smolvm
