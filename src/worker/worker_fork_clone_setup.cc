// The objects a clone rebuilds under its golden's guest ids, made ahead of
// the clone build (docs/fork.md, "Work ahead of forks"): the golden's worker
// describes its modules, functions, streams, events and cuDNN state at its
// forkpoint (AheadSetup, in ForkAhead.setup); a pooled worker in the
// golden's jail loads and replays them (ApplySetup from Preload); the clone
// build then applies its manifest over what the worker holds, so it keeps
// what matches and loads or replays only what changed since (a module loaded
// or a cuDNN descriptor finalized after the ahead, or a preload that failed).
//
// What "matches" means, per object (anything else is let go and made anew):
//   module    same id, wire hash and SHA-256 of the cached image;
//   function  same id, module id and name, its module kept;
//   stream    same id, flags and priority; event: same id and flags;
//   cuDNN     the same handle ids, and the worker's replayed log a prefix of
//             the wanted log: only the rest is replayed (a replay is
//             deterministic, so a prefix replayed ahead plus the rest is the
//             whole replay); otherwise every descriptor and handle goes and
//             the whole log is replayed. Handle streams are set again.
// The guest sees ids only, so the handles behind them may be any the worker
// made: same ids is what the golden's guest state expects (docs/architecture.md §4-§5).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <set>

#include "base/diagnostics.h"
#include "proto/dispatch.h"
#include "worker/worker.h"

namespace smolvm {
namespace {

// CUfunction_attribute has fewer than 32 values: a manifest with more for
// one function is not a golden's.
constexpr size_t kMaxFunctionAttrs = 32;

double MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

bool SameCall(const proto::ManifestDnnCall& a, const proto::ManifestDnnCall& b) {
  return a.op == b.op && a.request == b.request;
}

}  // namespace

void Worker::DescribeSetup(proto::ForkManifestBody* body) const {
  for (const auto& [id, mod] : modules_) body->modules.push_back({id, mod.hash, module_cache_.Sha256Of(mod.hash)});
  for (const auto& [id, f] : functions_) {
    proto::ManifestFunction mf{id, f.module, f.name, {}};
    for (const auto& [attr, value] : f.attrs) mf.attrs.push_back({attr, value});
    body->functions.push_back(std::move(mf));
  }
  for (const auto& [id, si] : streams_) body->streams.push_back({id, si.flags, si.priority});
  for (const auto& [id, ei] : events_) body->events.push_back({id, ei.flags});
  DnnManifest(body);
}

std::string Worker::AheadSetup() const {
  proto::ForkManifestBody body;
  DescribeSetup(&body);
  return proto::EncodeManifest(body);
}

void Worker::OnForkAheadAsk(bool at) {
  if (!at) {
    // The daemon let go of it (or never kept it: issue 29's descriptor
    // budget): a fork exports at fork time, and the next forkpoint again.
    ahead_epoch_ = 0;
    return;
  }
  // At the daemon's forkpoint the ahead export is made (or current) already.
  if (forkpoint_waiting_ || !control_) return;
  if (ahead_epoch_ != epoch_) SendAhead();
}

Status Worker::ApplySetup(const proto::ForkManifestBody& want, SetupCounts* counts) {
  auto t0 = std::chrono::steady_clock::now();
  // Modules: unload what the manifest does not name as it is.
  std::map<uint64_t, const proto::ManifestModule*> want_modules;
  for (const auto& m : want.modules) want_modules[m.id] = &m;
  for (auto it = modules_.begin(); it != modules_.end();) {
    auto w = want_modules.find(it->first);
    if (w != want_modules.end() && w->second->hash == it->second.hash && w->second->sha256 == it->second.sha256 &&
        !it->second.sha256.empty()) {
      ++it;
      continue;
    }
    (void)backend_->ModuleUnload(it->second.handle);
    it = modules_.erase(it);
  }
  std::set<uint64_t> loaded;
  for (const auto& m : want.modules) {
    // The golden's index entry: the clone is the same tenant.
    RETURN_IF_ERROR(module_cache_.Remember(m.hash, m.sha256));
    if (modules_.count(m.id)) {
      ++counts->modules_kept;
      continue;
    }
    ASSIGN_OR_RETURN(std::string image, module_cache_.Get(m.hash));
    ASSIGN_OR_RETURN(uint64_t h, backend_->ModuleLoad(image));
    modules_[m.id] = ModuleInfo{h, m.hash, m.sha256};
    loaded.insert(m.id);
    ++counts->modules_loaded;
  }
  // Functions: a handle of a module kept stays valid.
  std::map<uint64_t, const proto::ManifestFunction*> want_functions;
  for (const auto& f : want.functions) want_functions[f.id] = &f;
  for (auto it = functions_.begin(); it != functions_.end();) {
    auto w = want_functions.find(it->first);
    bool keep = w != want_functions.end() && w->second->module == it->second.module &&
                w->second->name == it->second.name && modules_.count(it->second.module) &&
                !loaded.count(it->second.module);
    it = keep ? std::next(it) : functions_.erase(it);
  }
  for (const auto& f : want.functions) {
    if (f.attrs.size() > kMaxFunctionAttrs) return Malformed("clone manifest: a function with too many attributes");
    if (!functions_.count(f.id)) {
      auto mod = modules_.find(f.module);
      if (mod == modules_.end()) return Malformed("clone manifest names an unknown module");
      ASSIGN_OR_RETURN(uint64_t h, backend_->ModuleGetFunction(mod->second.handle, f.name));
      functions_[f.id] = FunctionInfo{h, f.module, f.name};
    }
    // The golden's attributes (a kept function may hold them from a preload).
    FunctionInfo& mine = functions_[f.id];
    for (const auto& a : f.attrs) {
      auto held = mine.attrs.find(a.attr);
      if (held != mine.attrs.end() && held->second == a.value) continue;
      RETURN_IF_ERROR(backend_->FuncSetAttribute(mine.handle, a.attr, a.value));
      mine.attrs[a.attr] = a.value;
    }
  }
  counts->modules_ms = MsSince(t0);
  // Streams and events.
  std::map<uint64_t, const proto::ManifestStream*> want_streams;
  for (const auto& st : want.streams) want_streams[st.id] = &st;
  for (auto it = streams_.begin(); it != streams_.end();) {
    auto w = want_streams.find(it->first);
    if (w != want_streams.end() && w->second->flags == it->second.flags && w->second->priority == it->second.priority) {
      ++it;
      continue;
    }
    (void)backend_->StreamDestroy(it->second.handle);
    it = streams_.erase(it);
  }
  for (const auto& st : want.streams) {
    if (streams_.count(st.id)) continue;
    ASSIGN_OR_RETURN(uint64_t h, backend_->StreamCreate(st.flags, st.priority));
    streams_[st.id] = StreamInfo{h, st.flags, st.priority};
  }
  std::map<uint64_t, uint32_t> want_events;
  for (const auto& ev : want.events) want_events[ev.id] = ev.flags;
  for (auto it = events_.begin(); it != events_.end();) {
    auto w = want_events.find(it->first);
    if (w != want_events.end() && w->second == it->second.flags) {
      ++it;
      continue;
    }
    (void)backend_->EventDestroy(it->second.handle);
    it = events_.erase(it);
  }
  for (const auto& ev : want.events) {
    if (events_.count(ev.id)) continue;
    ASSIGN_OR_RETURN(uint64_t h, backend_->EventCreate(ev.flags));
    events_[ev.id] = EventInfo{h, ev.flags};
  }
  auto t_dnn = std::chrono::steady_clock::now();
  Status st = ApplyDnnSetup(want, counts);
  counts->dnn_ms = MsSince(t_dnn);
  return st;
}

// REQUIRES: streams_ as `want` names them.
Status Worker::ApplyDnnSetup(const proto::ForkManifestBody& want, SetupCounts* counts) {
  std::set<uint64_t> want_handles, held_handles;
  for (const auto& h : want.dnn_handles) want_handles.insert(h.id);
  for (const auto& [id, h] : dnn_.handles) held_handles.insert(id);
  bool prefix = dnn_.log.size() <= want.dnn_log.size() &&
                std::equal(dnn_.log.begin(), dnn_.log.end(), want.dnn_log.begin(), SameCall);
  if (want_handles != held_handles || !prefix) {
    // Not a prefix of what the clone must hold: start over.
    if (dnn_.backend) {
      for (auto it = dnn_.descs.rbegin(); it != dnn_.descs.rend(); ++it)
        (void)dnn_.backend->DescDestroy(it->second.value);
      for (auto& [id, h] : dnn_.handles) (void)dnn_.backend->Destroy(h.handle);
    }
    dnn_.descs.clear();
    dnn_.handles.clear();
    dnn_.log.clear();
  }
  if (want.dnn_handles.empty() && want.dnn_log.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(DnnBackend * dnn, Dnn());
  for (const auto& h : want.dnn_handles) {
    auto held = dnn_.handles.find(h.id);
    if (held == dnn_.handles.end()) {
      ASSIGN_OR_RETURN(uint64_t made, dnn->Create());
      held = dnn_.handles.emplace(h.id, DnnState::HandleInfo{made, 0}).first;
    }
    held->second.stream = h.stream;
    if (h.stream != 0) {
      ASSIGN_OR_RETURN(uint64_t s, Stream(h.stream));
      RETURN_IF_ERROR(dnn->SetStream(held->second.handle, s));
    }
  }
  counts->dnn_kept = static_cast<uint32_t>(dnn_.log.size());
  // Only what the log records; anything else in a manifest is refused. The
  // handlers append each call to dnn_.log again, so a clone of this clone
  // replays the same log.
  constexpr uint16_t kReplayable[] = {proto::DnnFinalizeRequest::kNumber, proto::DnnGetAttributeRequest::kNumber,
                                      proto::DnnDestroyDescRequest::kNumber};
  for (size_t i = dnn_.log.size(); i < want.dnn_log.size(); ++i) {
    const proto::ManifestDnnCall& call = want.dnn_log[i];
    if (std::find(std::begin(kReplayable), std::end(kReplayable), call.op) == std::end(kReplayable))
      return Malformed("clone manifest: a cuDNN log entry that is not a cuDNN descriptor call");
    proto::FrameHeader h;
    h.op = static_cast<uint16_t>(call.op);
    h.flags = proto::IsAsyncOp(h.op) ? proto::kFlagAsync : 0;
    h.payload_bytes = static_cast<uint32_t>(call.request.size());
    proto::CallContext ctx;
    ctx.header = &h;
    std::string reply;  // the golden's guest had its answer
    proto::DispatchOutcome o = proto::Dispatch(*this, h, call.request, &ctx, &reply);
    RETURN_IF_ERROR(o.status);
    ++counts->dnn_replayed;
  }
  if (dnn_.log.size() != want.dnn_log.size()) return Internal("the cuDNN replay did not log every call");
  return Status::Ok();
}

void Worker::DropSetup() {
  if (setup_golden_ != 0)
    std::fprintf(Diagnostics(), "smolvm worker %d: preload of session %llu dropped: %zu modules, %zu cuDNN calls\n",
                 ::getpid(), static_cast<unsigned long long>(setup_golden_), modules_.size(), dnn_.log.size());
  setup_golden_ = 0;
  if (dnn_.backend) {
    for (auto it = dnn_.descs.rbegin(); it != dnn_.descs.rend(); ++it)
      (void)dnn_.backend->DescDestroy(it->second.value);
    for (auto& [id, h] : dnn_.handles) (void)dnn_.backend->Destroy(h.handle);
  }
  dnn_.descs.clear();
  dnn_.handles.clear();
  dnn_.log.clear();
  functions_.clear();
  for (auto& [id, m] : modules_) (void)backend_->ModuleUnload(m.handle);
  modules_.clear();
  globals_.clear();
  global_moves_.clear();
  for (auto& [id, s] : streams_) (void)backend_->StreamDestroy(s.handle);
  streams_.clear();
  for (auto& [id, e] : events_) (void)backend_->EventDestroy(e.handle);
  events_.clear();
}

}  // namespace smolvm
