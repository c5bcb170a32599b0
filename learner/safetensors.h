// Safetensors files: reading through mmap and streaming writes.
//
// Format (https://github.com/huggingface/safetensors):
//   u64 LE  header_len
//   header  JSON: { "<name>": {"dtype":"BF16","shape":[..],"data_offsets":[b,e]}, ...,
//                   "__metadata__": {"format":"pt"} }   (space-padded to 8 bytes)
//   bytes   tensor data; offsets are relative to the end of the header
//
// A ModelFiles opens either DIR/model.safetensors or every shard named by
// DIR/model.safetensors.index.json. Opened kMapped, views point into
// read-only mappings that live as long as the ModelFiles (nothing is copied);
// opened kRead, there is no mapping and a tensor's bytes come only through
// ReadTensorBytes (pread). A loader that copies every byte into staging
// buffers reads: no page faults, half the CPU of faulting a mapping, the same
// on every filesystem (docs/learner.md, "Loading weights").
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace smolvm::learner {

class SafetensorsFile;

// How a file's tensor bytes are reached (see above).
enum class TensorAccess { kMapped, kRead };

struct TensorView {
  std::string name;
  std::string dtype;  // "BF16", "F32", ...
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping; null when opened kRead
  size_t bytes = 0;
  const SafetensorsFile* file = nullptr;  // the file holding it (outlives the view)
  uint64_t offset = 0;                    // of its first byte in that file
  int64_t Numel() const;
};

// Copies bytes [from, from + bytes) of tensor `v` into dst with pread, split
// over up to kReadStreams threads (pieces of at least 8 MiB), each with its
// own open file description, so the kernel's readahead follows each piece
// (one shared description made the threads' cold reads 2x slower). Fails,
// naming the file, when the range lies outside the tensor or the file
// shrank since it was opened (never a SIGBUS).
Status ReadTensorBytes(const TensorView& v, size_t from, size_t bytes, void* dst);

// Bytes per element of a safetensors dtype string, 0 when unknown.
size_t DtypeSize(const std::string& dtype);

class SafetensorsFile {
 public:
  static constexpr unsigned kReadStreams = 8;

  // Opens `path` and validates the header: known dtypes, offsets inside the
  // file, sizes consistent with shapes, no overlaps. kMapped maps the file.
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path,
                                                      TensorAccess access = TensorAccess::kMapped);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::string& path() const { return path_; }

  // Copies `bytes` bytes at file offset `offset` into dst through read
  // stream `stream` (< kReadStreams; one thread per stream at a time).
  Status Read(unsigned stream, uint64_t offset, size_t bytes, void* dst) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  uint64_t size_ = 0;
  std::vector<UniqueFd> fds_;  // kReadStreams descriptions of the file opened first
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::map<std::string, TensorView> tensors_;
};

class ModelFiles {
 public:
  static Result<std::unique_ptr<ModelFiles>> Open(const std::string& dir,
                                                  TensorAccess access = TensorAccess::kMapped);
  // The tensor `name`; fails naming the file when it is absent, when its
  // dtype is not `dtype`, or when its shape differs from `shape`.
  Result<TensorView> Get(const std::string& name, const std::string& dtype,
                         const std::vector<int64_t>& shape) const;
  bool Has(const std::string& name) const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

// One tensor to write: its bytes come from `fill(dst)` when written, so a
// multi-gigabyte model never has to sit in memory at once.
struct TensorSpec {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::function<void(uint8_t* dst)> fill;
  size_t Bytes() const;
};

Status WriteSafetensors(const std::string& path, const std::vector<TensorSpec>& tensors);

// Writes `tensors` into `dir`: one model.safetensors when the total is at most
// `shard_bytes`, else model-0000i-of-0000N.safetensors shards plus
// model.safetensors.index.json.
Status WriteModelShards(const std::string& dir, const std::vector<TensorSpec>& tensors,
                        size_t shard_bytes);

}  // namespace smolvm::learner
