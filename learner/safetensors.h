// Safetensors files: reading through mmap and streaming writes.
//
// Format (https://github.com/huggingface/safetensors):
//   u64 LE  header_len
//   header  JSON: { "<name>": {"dtype":"BF16","shape":[..],"data_offsets":[b,e]}, ...,
//                   "__metadata__": {"format":"pt"} }   (space-padded to 8 bytes)
//   bytes   tensor data; offsets are relative to the end of the header
//
// A ModelFiles opens either DIR/model.safetensors or every shard named by
// DIR/model.safetensors.index.json. Views point into read-only mappings that
// live as long as the ModelFiles; nothing is copied. The mappings are 2 MiB
// aligned with MADV_HUGEPAGE, so reading them brings the file into the page
// cache in 2 MiB folios (safetensors.cc, MapForLoading).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace smolvm::learner {

struct TensorView {
  std::string name;
  std::string dtype;  // "BF16", "F32", ...
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  int64_t Numel() const;
};

// Bytes per element of a safetensors dtype string, 0 when unknown.
size_t DtypeSize(const std::string& dtype);

class SafetensorsFile {
 public:
  // Maps `path` and validates the header: known dtypes, offsets inside the
  // file, sizes consistent with shapes, no overlaps.
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::map<std::string, TensorView> tensors_;
};

class ModelFiles {
 public:
  static Result<std::unique_ptr<ModelFiles>> Open(const std::string& dir);
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
