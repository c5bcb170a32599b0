#include "learner/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/unique_fd.h"

namespace smolvm::learner {

using json = nlohmann::json;

int64_t TensorView::Numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t DtypeSize(const std::string& dtype) {
  if (dtype == "BF16" || dtype == "F16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "U8" || dtype == "I8" || dtype == "BOOL") return 1;
  return 0;
}

size_t TensorSpec::Bytes() const {
  size_t n = DtypeSize(dtype);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

// Maps a model file read-only at a 2 MiB-aligned address with
// MADV_HUGEPAGE. A fault on a page not in the page cache then reads it in
// 2 MiB folios (the kernel's huge-page readahead of file mappings), not the
// 4 KiB ones of plain mmap read-around, and a fault on a cached 2 MiB folio
// maps all of it with one page-table entry. Warm loads run ~7x faster from
// 2 MiB folios, and the same from a pack's erofs as from a host directory
// (docs/machines.md, "Reading speed"). Best effort: without transparent huge
// pages it is a plain mapping.
static Result<void*> MapForLoading(int fd, size_t size, const std::string& path) {
  constexpr size_t kHuge = size_t{2} << 20;
  // Reserve room to align, map the file over the aligned part, give back the rest.
  const size_t len = (size + 4095) & ~size_t{4095};
  void* area = mmap(nullptr, len + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (area == MAP_FAILED) return ErrnoStatus("cannot reserve address space for " + path, errno);
  const uintptr_t start = reinterpret_cast<uintptr_t>(area);
  const uintptr_t aligned = (start + kHuge - 1) & ~(kHuge - 1);
  void* map = mmap(reinterpret_cast<void*>(aligned), size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
  if (map == MAP_FAILED) {
    int e = errno;
    munmap(area, len + kHuge);
    return ErrnoStatus("cannot mmap " + path, e);
  }
  if (aligned > start) munmap(area, aligned - start);
  if (start + kHuge > aligned) munmap(reinterpret_cast<void*>(aligned + len), start + kHuge - aligned);
  madvise(map, size, MADV_HUGEPAGE);
  return map;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoStatus("cannot open model file " + path, errno);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoStatus("cannot stat " + path, errno);
  size_t size = static_cast<size_t>(st.st_size);
  auto bad = [&](const std::string& why) { return Malformed("corrupt safetensors file " + path + ": " + why); };
  if (size < 8) return bad("shorter than its 8-byte header length");
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  ASSIGN_OR_RETURN(f->map_, MapForLoading(fd.get(), size, path));
  f->map_bytes_ = size;
  const uint8_t* base = static_cast<const uint8_t*>(f->map_);
  uint64_t header_len;
  std::memcpy(&header_len, base, 8);
  if (header_len > size - 8) return bad("header length " + std::to_string(header_len) + " exceeds the file");
  json header = json::parse(base + 8, base + 8 + header_len, nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) return bad("header is not a JSON object");
  const uint8_t* data = base + 8 + header_len;
  size_t data_bytes = size - 8 - header_len;
  std::vector<std::pair<size_t, size_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const json& t = it.value();
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets") ||
        !t["dtype"].is_string() || !t["shape"].is_array() || !t["data_offsets"].is_array() ||
        t["data_offsets"].size() != 2)
      return bad("tensor '" + it.key() + "' has a malformed entry");
    TensorView v;
    v.name = it.key();
    v.dtype = t["dtype"].get<std::string>();
    size_t esize = DtypeSize(v.dtype);
    if (esize == 0) return bad("tensor '" + it.key() + "' has unknown dtype " + v.dtype);
    size_t numel = 1;
    for (const json& d : t["shape"]) {
      if (!d.is_number_unsigned()) return bad("tensor '" + it.key() + "' has a bad shape");
      v.shape.push_back(d.get<int64_t>());
      numel *= d.get<size_t>();
    }
    if (!t["data_offsets"][0].is_number_unsigned() || !t["data_offsets"][1].is_number_unsigned())
      return bad("tensor '" + it.key() + "' has bad data_offsets");
    size_t b = t["data_offsets"][0].get<size_t>(), e = t["data_offsets"][1].get<size_t>();
    if (b > e || e > data_bytes)
      return bad("tensor '" + it.key() + "' lies outside the file (truncated?)");
    if (e - b != numel * esize) return bad("tensor '" + it.key() + "' size does not match its shape");
    v.data = data + b;
    v.bytes = e - b;
    ranges.emplace_back(b, e);
    f->tensors_.emplace(v.name, std::move(v));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) return bad("tensors overlap");
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, map_bytes_);
}

Result<std::unique_ptr<ModelFiles>> ModelFiles::Open(const std::string& dir) {
  auto m = std::make_unique<ModelFiles>();
  m->dir_ = dir;
  std::vector<std::string> files;
  std::string index_path = dir + "/model.safetensors.index.json";
  std::ifstream index(index_path);
  if (index) {
    json j = json::parse(index, nullptr, false);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      return Malformed("corrupt " + index_path + ": no weight_map object");
    for (auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string()) return Malformed("corrupt " + index_path + ": bad entry for " + name);
      std::string f = file.get<std::string>();
      if (f.find('/') != std::string::npos) return Malformed("corrupt " + index_path + ": bad file name " + f);
      if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
    }
  } else {
    files.push_back("model.safetensors");
  }
  for (const std::string& f : files) {
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(dir + "/" + f));
    m->files_.push_back(std::move(file));
  }
  for (auto& f : m->files_)
    for (auto& [name, view] : f->tensors()) m->index_[name] = &view;
  return m;
}

bool ModelFiles::Has(const std::string& name) const { return index_.count(name) != 0; }

static std::string ShapeString(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

Result<TensorView> ModelFiles::Get(const std::string& name, const std::string& dtype,
                                   const std::vector<int64_t>& shape) const {
  auto it = index_.find(name);
  if (it == index_.end()) return NotFound("model in " + dir_ + " lacks tensor " + name);
  const TensorView& v = *it->second;
  if (v.dtype != dtype)
    return InvalidArgument("tensor " + name + " in " + dir_ + " is " + v.dtype + ", expected " + dtype);
  if (v.shape != shape)
    return InvalidArgument("shape mismatch: tensor " + name + " is " + ShapeString(v.shape) +
                           " but config.json implies " + ShapeString(shape));
  return v;
}

Status WriteSafetensors(const std::string& path, const std::vector<TensorSpec>& tensors) {
  json header = json::object();
  size_t offset = 0;
  for (const TensorSpec& t : tensors) {
    size_t n = t.Bytes();
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string h = header.dump();
  while ((h.size() + 8) % 8) h.push_back(' ');
  std::string tmp = path + ".tmp";
  FILE* out = std::fopen(tmp.c_str(), "wb");
  if (!out) return ErrnoStatus("cannot create " + tmp, errno);
  uint64_t len = h.size();
  bool ok = std::fwrite(&len, 8, 1, out) == 1 && std::fwrite(h.data(), 1, h.size(), out) == h.size();
  std::vector<uint8_t> buf;
  for (const TensorSpec& t : tensors) {
    if (!ok) break;
    buf.assign(t.Bytes(), 0);
    t.fill(buf.data());
    ok = std::fwrite(buf.data(), 1, buf.size(), out) == buf.size();
  }
  int err = errno;
  if (std::fclose(out) != 0) ok = false;
  if (!ok) {
    std::remove(tmp.c_str());
    return ErrnoStatus("cannot write " + path, err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("cannot rename to " + path, errno);
  return Status::Ok();
}

Status WriteModelShards(const std::string& dir, const std::vector<TensorSpec>& tensors, size_t shard_bytes) {
  size_t total = 0;
  for (const TensorSpec& t : tensors) total += t.Bytes();
  if (total <= shard_bytes) return WriteSafetensors(dir + "/model.safetensors", tensors);
  std::vector<std::vector<TensorSpec>> shards(1);
  size_t cur = 0;
  for (const TensorSpec& t : tensors) {
    if (cur > 0 && cur + t.Bytes() > shard_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(t);
    cur += t.Bytes();
  }
  json weight_map = json::object();
  char name[64];
  for (size_t i = 0; i < shards.size(); ++i) {
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    RETURN_IF_ERROR(WriteSafetensors(dir + "/" + name, shards[i]));
    for (const TensorSpec& t : shards[i]) weight_map[t.name] = name;
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  std::ofstream f(dir + "/model.safetensors.index.json");
  f << index.dump(2) << "\n";
  if (!f) return ErrnoStatus("cannot write " + dir + "/model.safetensors.index.json", errno);
  return Status::Ok();
}

}  // namespace smolvm::learner
