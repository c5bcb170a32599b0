// UploadTrace: what host-to-device copies wrote into one chunk, for the
// `--share auto` heuristic (docs/architecture.md §4, docs/fork.md "Share modes").
//
// A chunk qualifies for sharing under `auto` when nothing but host-to-device
// copies wrote it since it was made, those copies cover every allocated byte
// of it, and at fork time (golden synchronized) the device still holds
// exactly what they wrote: each uploaded range is kept as (offset, bytes,
// XXH3-64 of the bytes) and compared with a hash of the device's content.
// A range uploaded twice spoils the chunk (an input buffer, not weights).
// Kernel writes cannot be seen from the API; the comparison catches those
// that happened before the fork, and the read-only mapping of a shared chunk
// turns any later one into a fault in the writer.
//
// Owned by its chunk's record (DeviceMemory); worker thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace smolvm {

uint64_t UploadHash(const void* data, uint64_t bytes);

class UploadTrace {
 public:
  // [off, off+bytes) of the chunk now holds `data`, written by a
  // host-to-device copy. An upload over bytes uploaded before spoils the
  // trace: a buffer uploaded again and again holds inputs, not weights, and
  // is hashed at most once.
  void NoteUpload(uint64_t off, const void* data, uint64_t bytes);
  // Something else (a memset, a device-to-device copy) wrote the chunk: it
  // never qualifies again.
  void NoteOtherWrite();
  // A new allocation starts at [off, off+bytes): uploads into a freed
  // allocation there say nothing about it.
  void NoteFresh(uint64_t off, uint64_t bytes);

  bool clean() const { return clean_; }
  // True when the trace is clean and its uploads cover every (offset, bytes)
  // range of `live` (the chunk's allocated bytes), and `live` is not empty.
  bool Covers(const std::vector<std::pair<uint64_t, uint64_t>>& live) const;
  // Reads each uploaded range through `read(off, bytes, out)` and compares
  // its hash; false at the first difference.
  Result<bool> Matches(const std::function<Status(uint64_t, uint64_t, std::string*)>& read) const;

 private:
  struct Piece {
    uint64_t bytes = 0;
    uint64_t hash = 0;
  };
  bool clean_ = true;
  std::map<uint64_t, Piece> pieces_;  // by offset; never overlapping
};

}  // namespace smolvm
