// FakeDnnBackend: cuDNN's backend API as host code over FakeBackend's device
// memory (mapped at the arena addresses in the worker), for CI.
//
// Every descriptor is kept as its type and attributes. Finalize validates
// what cuDNN requires of the types below (tensors: data type, dimensions,
// strides of the same rank, unique id, alignment; pointwise and matmul
// operations: their descriptors and tensors; an operation graph: finalized
// operations and a live handle; engine: a global index the fake has;
// engine config: knob choices its engine takes, in range; plan: their
// references; knob choice: type and value); other types are kept unvalidated. A referenced descriptor
// must exist and be finalized (CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
// destroying a descriptor leaves what references it intact, as cuDNN does.
// Heuristics, engines, engine configs and knobs follow the fake's engine
// catalogue (dnn_fake_internal.h): heuristics recommend engine 0 then 1
// (fallback mode: 1), each config carrying its engine's knob choices; an
// engine answers its numerical and behavior notes and knob infos; a config
// its knob choices, workspace and shared memory; a plan its config's
// workspace and a JSON representation. A plan is supported when
// its graph holds only fp32 pointwise (ADD, MUL, SUB, MIN, MAX, DIV,
// IDENTITY, RELU_FWD, EXP, LOG, NEG, RECIPROCAL, with broadcasting),
// reduction (ADD, MAX, MIN over the output's size-1 dimensions) and matmul
// operations (so attention decomposed as cuDNN graphs spell it runs).
// Execute checks the variant pack against the graph (every non-virtual uid
// present, every device tensor inside writable fake memory, the workspace
// given when the plan needs one) and computes the graph in operation order.
// Anything else answers CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN.
// GetAttribute with a null element array answers the count only, as cuDNN
// does (cudnn-frontend counts notes that way).
// A handle holds kFakeLibraryFootprint's dnn_handle in the FakeBackend's
// memory from Create to Destroy (CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED
// when it does not fit), as cudnnCreate allocates device memory.
#pragma once

#include <map>
#include <string>

#include "backend/dnn_backend.h"
#include "backend/fake_backend.h"

namespace smolvm {

class FakeDnnBackend final : public DnnBackend {
 public:
  explicit FakeDnnBackend(FakeBackend* gpu) : gpu_(gpu) {}
  ~FakeDnnBackend() override;  // gives back what live handles hold

  std::string_view Name() const override { return "fake"; }
  Result<uint64_t> Create() override;
  Status Destroy(uint64_t handle) override;
  Status SetStream(uint64_t handle, uint64_t stream) override;
  DnnVersion Version() const override;
  Result<uint64_t> DescCreate(uint32_t type) override;
  Status DescDestroy(uint64_t desc) override;
  Status DescSet(uint64_t desc, uint32_t name, uint32_t type, int64_t count,
                 const void* values) override;
  Status DescFinalize(uint64_t desc) override;
  Status DescGet(uint64_t desc, uint32_t name, uint32_t type, int64_t requested, int64_t* count,
                 void* values) override;
  Status Execute(uint64_t handle, uint64_t plan, const DnnVariantPack& pack) override;

  // Test hooks.
  static constexpr uint64_t kVersion = 91000;  // what the fake reports as cudnnGetVersion
  int executes() const { return executes_; }
  int finalizes() const { return finalizes_; }
  size_t live_descriptors() const;
  uint64_t handle_stream(uint64_t handle) const;

  struct Attr {
    uint32_t type = 0;
    std::string values;
  };
  struct Desc {
    uint32_t type = 0;
    bool finalized = false;
    bool destroyed = false;  // kept: what references it holds on (cuDNN copies)
    std::map<uint32_t, Attr> attrs;
  };

 private:
  Status Validate(const Desc& d) const;
  Result<const Desc*> Ref(const Desc& d, uint32_t name, uint32_t want_type) const;
  Status CopyInto(uint64_t src, uint64_t dst);
  // dnn_fake_engines.cc: the attributes heuristics, engines, configs and
  // plans compute. Sets *handled when `name` is one of them.
  Status EngineGet(const Desc& d, uint32_t name, uint32_t type, int64_t requested,
                   int64_t* count, void* values, bool* handled);
  Status ValidateEngine(const Desc& engine) const;
  Status ValidateConfig(const Desc& cfg) const;
  // Makes `out` (an engine config of the caller's) name engine `index` of
  // `graph`, with the knob choices heuristics make.
  Status FillConfig(uint64_t out, const Attr& graph, int64_t index);
  // The plan's (or config's) engine index and its workspace in bytes.
  Result<int64_t> ConfigEngine(const Desc& cfg) const;
  Result<int64_t> ConfigWorkspace(const Desc& cfg) const;
  Result<const Desc*> PlanConfig(const Desc& plan) const;
  Result<const Desc*> GraphOf(const Desc& cfg) const;
  // A descriptor the caller may still use: nullptr when unknown or destroyed.
  Desc* Live(uint64_t desc);

  FakeBackend* gpu_;
  uint64_t next_ = 1;
  std::map<uint64_t, uint64_t> handles_;  // handle -> stream
  std::map<uint64_t, Desc> descs_;
  int executes_ = 0;
  int finalizes_ = 0;
};

}  // namespace smolvm
