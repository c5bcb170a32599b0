#include "shim/host_registrations.h"

#include <iterator>

namespace smolvm::shim {

Status HostRegistrations::Add(uint64_t p, uint64_t bytes, unsigned flags) {
  if (p == 0 || bytes == 0 || p + bytes < p) return InvalidArgument("a registration needs a pointer and a length");
  auto next = ranges_.lower_bound(p);
  if (next != ranges_.end() && next->first < p + bytes) return Status(Code::kAlreadyExists, "the range is registered already");
  if (next != ranges_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.bytes > p) return Status(Code::kAlreadyExists, "the range is registered already");
  }
  ranges_.emplace(p, HostRegistration{bytes, flags});
  return Status::Ok();
}

Status HostRegistrations::Remove(uint64_t p) {
  if (ranges_.erase(p) == 0) return NotFound("no registration starts there");
  return Status::Ok();
}

const HostRegistration* HostRegistrations::Find(uint64_t p, uint64_t* base) const {
  auto it = ranges_.upper_bound(p);
  if (it == ranges_.begin()) return nullptr;
  --it;
  if (p - it->first >= it->second.bytes) return nullptr;
  if (base != nullptr) *base = it->first;
  return &it->second;
}

}  // namespace smolvm::shim
