// What the FakeDnnBackend's files share (dnn_fake.cc: descriptors and
// validation; dnn_fake_engines.cc: heuristics, engines, configs, knobs;
// dnn_fake_execute.cc: the graph computed). Not for use outside them.
#pragma once

#include <cudnn_graph.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend/dnn_fake.h"

namespace smolvm::fake_dnn {

inline Status Bad(const std::string& what) {
  return DnnError(CUDNN_STATUS_BAD_PARAM, "fake cuDNN: " + what);
}
inline Status Pattern(const std::string& what) {
  return DnnError(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN, "fake cuDNN: " + what);
}

inline std::vector<int64_t> Int64s(const FakeDnnBackend::Attr& a) {
  std::vector<int64_t> v(a.values.size() / 8);
  if (!v.empty()) std::memcpy(v.data(), a.values.data(), v.size() * 8);
  return v;
}

template <typename T>
T First(const FakeDnnBackend::Attr& a) {
  T v{};
  std::memcpy(&v, a.values.data(), std::min(sizeof v, a.values.size()));
  return v;
}

// Element i of a descriptor-valued attribute.
inline uint64_t RefAt(const FakeDnnBackend::Attr& a, size_t i) {
  uint64_t v = 0;
  if ((i + 1) * 8 <= a.values.size()) std::memcpy(&v, a.values.data() + i * 8, 8);
  return v;
}

inline FakeDnnBackend::Attr Int64Attr(int64_t v) {
  return {CUDNN_TYPE_INT64, std::string(reinterpret_cast<const char*>(&v), 8)};
}

struct Tensor {
  int64_t uid = 0;
  int32_t dtype = -1;
  std::vector<int64_t> dims, strides;
  bool is_virtual = false, by_value = false;
  int64_t Span() const {  // elements from the first to one past the last
    int64_t s = 1;
    for (size_t d = 0; d < dims.size(); ++d) s += (dims[d] - 1) * strides[d];
    return s;
  }
  // The element at y's multi-index `idx`, dimensions of size 1 broadcast.
  int64_t Offset(const std::vector<int64_t>& idx) const {
    int64_t o = 0;
    size_t lead = idx.size() - dims.size();
    for (size_t d = 0; d < dims.size(); ++d) o += (dims[d] == 1 ? 0 : idx[lead + d]) * strides[d];
    return o;
  }
};

Result<Tensor> TensorOf(const FakeDnnBackend::Desc& d);

bool Binary(int32_t mode);
bool Supported(int32_t mode);
bool SupportedReduction(int32_t op);
float Apply(int32_t mode, float x, float b);
// Steps `idx` through every multi-index below `dims`; false after the last.
bool Next(std::vector<int64_t>& idx, const std::vector<int64_t>& dims);

// The fake's engines. Heuristics recommend them in this order (the fallback
// mode only the last); what they declare is what they do: engine 1
// accumulates matmuls in fp32 (REDUCED_PRECISION_REDUCTION), engine 0 in
// double with a workspace of kWorkspacePerMatmul bytes per matmul of the
// graph, which an execute must be given. Knobs are labels (both engines
// compute the same whatever the choice), validated against their ranges.
struct Knob {
  int32_t type = 0;  // cudnnBackendKnobType_t
  int64_t min = 0, max = 0, stride = 1;
  int64_t choice = 0;  // what heuristics choose
};
struct Engine {
  int64_t index = 0;
  std::vector<int32_t> numerical_notes;  // cudnnBackendNumericalNote_t
  std::vector<int32_t> behavior_notes;   // cudnnBackendBehaviorNote_t
  std::vector<Knob> knobs;
  int64_t workspace_per_matmul = 0;
  int32_t shared_memory = 0;
  bool fp32_accumulate = false;
};
inline constexpr int64_t kWorkspacePerMatmul = 256;
const std::vector<Engine>& Engines();
// nullptr for an index no engine has.
const Engine* EngineAt(int64_t index);

}  // namespace smolvm::fake_dnn
