#include "base/status.h"

#include <cstring>

namespace smolvm {

std::string Status::ToString() const {
  if (ok()) return "OK";
  return message_.empty() ? "error " + std::to_string(code_) : message_;
}

Status ErrnoStatus(const std::string& what, int err) {
  return Status(Code::kIo, what + ": " + std::strerror(err));
}

}  // namespace smolvm
