// ContextTable: the contexts a guest created (cuCtxCreate, ops 190-192) in
// one worker, and which of them the guest's ops run in now.
//
// The guest names contexts with ids of its choosing (0 is the primary
// context, the worker's own); the table maps each to the backend's handle,
// keeps the session's cap (kMaxContexts), which created context each device
// allocation was made in (they go with it), and the per-context instances of
// primary-context modules: the runtime loads a program's kernels once, in
// the primary context, and a launch of one while a created context is
// current runs an instance loaded there from the same image (as CUDA's
// runtime loads its modules into each context that uses them).
//
// What runs where: ops that need no context, or that a created context
// supports here (memory, copies, streams, events, modules, launches, host
// functions, queries), run in the current one; the others
// (AllowedInCreated false: cuBLAS, cuBLASLt, cuDNN, graphs and capture,
// arrays and texture and surface objects, virtual memory, context limits,
// fork) are refused by name while a created
// context is current. After a CtxSetCurrent to an id the table does not
// hold, the current context is invalid: every context-dependent op fails
// with CUDA_ERROR_INVALID_CONTEXT until the next valid one.
//
// Process: the worker; one thread (the worker's). Owned by the Worker.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace smolvm {

class ContextTable {
 public:
  // Created contexts one session may hold at once: each costs what a
  // worker's context does (hundreds of MiB on a GPU, charged to --gpu-mem).
  static constexpr uint32_t kMaxContexts = 8;

  // The guest id ops run in now (0: the primary context); valid() false
  // after a CtxSetCurrent to an unknown id.
  uint64_t current() const { return current_; }
  bool valid() const { return valid_; }
  bool in_created() const { return current_ != 0 || !valid_; }
  bool empty() const { return contexts_.empty(); }
  // The live created contexts' ids.
  std::vector<uint64_t> ids() const {
    std::vector<uint64_t> out;
    for (const auto& [id, handle] : contexts_) out.push_back(id);
    return out;
  }
  size_t size() const { return contexts_.size(); }

  // OK when `id` may name a new context: nonzero, unused, under the cap.
  Status CheckNew(uint64_t id) const;
  void Add(uint64_t id, uint64_t backend_handle) { contexts_[id] = backend_handle; }
  // The backend's handle of `id` (0 for the primary), or INVALID_CONTEXT.
  Result<uint64_t> Backend(uint64_t id) const;
  bool Has(uint64_t id) const { return id == 0 || contexts_.count(id) != 0; }
  // Makes `id` current when the table holds it; otherwise the current
  // context becomes invalid and INVALID_CONTEXT is returned.
  Status Select(uint64_t id);
  // Forgets `id` (after the backend destroyed it): its allocations and
  // instances are handed back for the caller to release; if it was current,
  // the primary is (unless the current context is invalid: it stays so).
  struct Taken {
    std::vector<uint64_t> allocations;
    std::vector<uint64_t> instance_modules;  // backend module handles loaded in it
  };
  Taken Remove(uint64_t id);

  // Allocations made while a created context was current.
  void OwnAllocation(uint64_t dptr) {
    if (current_ != 0) allocations_[dptr] = current_;
  }
  void DropAllocation(uint64_t dptr) { allocations_.erase(dptr); }

  // A primary-context function's instance in context `ctx`: its backend
  // function, or 0 when not loaded yet; Instance adds one (with the backend
  // module it came from, unloaded with the context).
  uint64_t InstanceOf(uint64_t ctx, uint64_t function) const;
  void AddInstance(uint64_t ctx, uint64_t function, uint64_t module_id, uint64_t backend_module,
                   uint64_t backend_function);
  // The module instance of a guest module id in `ctx`, or 0.
  uint64_t ModuleInstanceOf(uint64_t ctx, uint64_t module_id) const;
  // A guest module was unloaded: its instances' backend modules, to unload.
  std::vector<std::pair<uint64_t, uint64_t>> DropModuleInstances(uint64_t module_id);  // (ctx, backend module)

  // Whether op `op` may run while a created context is current.
  static bool AllowedInCreated(uint16_t op);
  // Whether op `op` needs a valid current context at all.
  static bool NeedsContext(uint16_t op);

 private:
  uint64_t current_ = 0;
  bool valid_ = true;
  std::map<uint64_t, uint64_t> contexts_;     // guest id -> backend handle
  std::map<uint64_t, uint64_t> allocations_;  // dptr -> guest context id
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> functions_;  // (ctx, guest function) -> backend function
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> modules_;    // (ctx, guest module) -> backend module
};

}  // namespace smolvm
