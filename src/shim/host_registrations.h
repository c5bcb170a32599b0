// HostRegistrations: the ranges of its own memory a program registered
// with cudaHostRegister / cuMemHostRegister (any pointer, any length:
// partial pages included).
//
// Registered memory stays the program's own pages: the worker cannot map
// them without a descriptor (a later isolation mode passes none), so copies
// to and from them take the pageable path, staged at the call (docs/shim.md,
// "Registered host memory"). The table answers what CUDA answers about
// them: overlaps (already registered), unregistering an unknown base, the
// flags, what a pointer is.
//
// Not thread-safe by itself: the Runtime holds the session lock.
#pragma once

#include <cstdint>
#include <map>

#include "base/status.h"

namespace smolvm::shim {

struct HostRegistration {
  uint64_t bytes = 0;
  unsigned flags = 0;  // cudaHostRegister flags
};

class HostRegistrations {
 public:
  // kAlreadyExists when [p, p+bytes) overlaps a registration; kInvalidArgument
  // for a null pointer, zero bytes or a range that wraps.
  Status Add(uint64_t p, uint64_t bytes, unsigned flags);
  // kNotFound unless a registration starts at p.
  Status Remove(uint64_t p);
  // The registration holding p, or nullptr.
  const HostRegistration* Find(uint64_t p, uint64_t* base) const;
  size_t size() const { return ranges_.size(); }

 private:
  std::map<uint64_t, HostRegistration> ranges_;  // by base
};

}  // namespace smolvm::shim
