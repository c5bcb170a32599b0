// The clone's half of a fork: a pooled worker preloads a golden's chunks
// ahead (ForkPreload), then rebuilds the golden's session from its manifest
// (CloneBuild): memory at the same addresses, modules, functions, streams,
// events, cuBLAS and cuDNN handles under the same guest ids.
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <iterator>

#include "proto/dispatch.h"
#include "worker/worker.h"

namespace smolvm {

Result<proto::CloneBuiltRequest> Worker::BuildClone(const proto::CloneBuildRequest& req,
                                                    const std::vector<UniqueFd>& chunk_fds) {
  auto t0 = std::chrono::steady_clock::now();
  proto::ForkManifestBody j;
  if (!proto::DecodeManifest(req.manifest, &j)) return Malformed("clone manifest does not decode");
  std::vector<int> fds;
  for (const auto& fd : chunk_fds) fds.push_back(fd.get());
  uint32_t preloaded = 0;
  // The golden's chunks this worker imported ahead, if they are that golden's.
  std::map<uint64_t, MappedImport> ahead;
  if (preload_->golden() == req.golden && req.golden != 0) {
    ahead = preload_->Take();
    for (const auto& c : j.layout.chunks) {
      auto it = ahead.find(c.addr);
      preloaded += it != ahead.end() && c.shared != 0 && it->second.id == c.id;
    }
  } else {
    preload_->Drop();
  }
  RETURN_IF_ERROR(memory_->ImportLayout(j.layout, fds, std::move(ahead)));
  double layout_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& m : j.modules) {
    // The golden's index entry: the clone is the same tenant.
    RETURN_IF_ERROR(module_cache_.Remember(m.hash, m.sha256));
    ASSIGN_OR_RETURN(std::string image, module_cache_.Get(m.hash));
    ASSIGN_OR_RETURN(uint64_t h, backend_->ModuleLoad(image));
    modules_[m.id] = ModuleInfo{h, m.hash};
  }
  for (const auto& f : j.functions) {
    auto mod = modules_.find(f.module);
    if (mod == modules_.end()) return Malformed("clone manifest names an unknown module");
    ASSIGN_OR_RETURN(uint64_t h, backend_->ModuleGetFunction(mod->second.handle, f.name));
    functions_[f.id] = FunctionInfo{h, f.module, f.name};
  }
  auto ms_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
  double modules_ms = ms_since(t0) - layout_ms;
  for (const auto& st : j.streams) {
    ASSIGN_OR_RETURN(uint64_t h, backend_->StreamCreate(st.flags, st.priority));
    streams_[st.id] = StreamInfo{h, st.flags, st.priority};
  }
  for (const auto& ev : j.events) {
    ASSIGN_OR_RETURN(uint64_t h, backend_->EventCreate(ev.flags));
    events_[ev.id] = EventInfo{h, ev.flags};
  }
  // cuBLAS and cuBLASLt handles under the same guest ids, with their stream,
  // modes and workspace (same addresses: the workspace is golden memory).
  auto t_blas = std::chrono::steady_clock::now();
  if (!j.blas.empty() || !j.lt.empty()) {
    ASSIGN_OR_RETURN(BlasBackend * blas, Blas());
    for (const auto& b : j.blas) {
      BlasHandleInfo info;
      info.stream = b.stream;
      ASSIGN_OR_RETURN(info.handle, blas->Create());
      blas_handles_[b.id] = info;
      BlasHandleInfo& rec = blas_handles_[b.id];
      if (info.stream != 0) {
        ASSIGN_OR_RETURN(uint64_t s, Stream(info.stream));
        RETURN_IF_ERROR(blas->SetStream(rec.handle, s));
      }
      for (const auto& m : b.modes) {
        RETURN_IF_ERROR(blas->SetMode(rec.handle, static_cast<BlasMode>(m.what), m.value));
        rec.modes[m.what] = m.value;
      }
      rec.workspace = b.workspace;
      rec.workspace_bytes = b.workspace_bytes;
      if (rec.workspace_bytes) RETURN_IF_ERROR(blas->SetWorkspace(rec.handle, rec.workspace, rec.workspace_bytes));
    }
    for (uint64_t l : j.lt) {
      ASSIGN_OR_RETURN(uint64_t h, blas->LtCreate());
      lt_handles_[l] = h;
    }
  }
  double blas_ms = ms_since(t_blas);
  // cuDNN handles and finalized descriptors (plans too) under the same ids.
  auto t_dnn = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(DnnRebuild(j));
  double dnn_ms = ms_since(t_dnn);
  proto::CloneBuiltRequest built;
  for (const auto& [addr, c] : memory_->chunks()) {
    if (c.shared) {
      ++built.shared_chunks;
      built.shared_bytes += c.bytes;
    } else {
      ++built.private_chunks;
      built.private_bytes += c.bytes;
    }
  }
  built.ms = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - t0).count();
  built.preloaded = preloaded;
  std::fprintf(stderr,
               "smolvm worker %d: clone build: memory %.1f ms (%u shared chunks preloaded), modules %.1f ms (%zu), "
               "blas %.1f ms, dnn %.1f ms (%zu calls replayed), total %.1f ms\n",
               ::getpid(), layout_ms, preloaded, modules_ms, j.modules.size(), blas_ms, dnn_ms, j.dnn_log.size(),
               static_cast<double>(built.ms));
  return built;
}

// REQUIRES: streams_ rebuilt. Replays the golden's cuDNN calls in order,
// under the same ids, through the generated guest dispatch.
Status Worker::DnnRebuild(const proto::ForkManifestBody& body) {
  if (body.dnn_handles.empty() && body.dnn_log.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(DnnBackend * dnn, Dnn());
  for (const auto& h : body.dnn_handles) {
    ASSIGN_OR_RETURN(uint64_t made, dnn->Create());
    dnn_.handles[h.id] = DnnState::HandleInfo{made, h.stream};
    if (h.stream != 0) {
      ASSIGN_OR_RETURN(uint64_t s, Stream(h.stream));
      RETURN_IF_ERROR(dnn->SetStream(made, s));
    }
  }
  // Only what the log records; anything else in a manifest is refused.
  constexpr uint16_t kReplayable[] = {proto::DnnFinalizeRequest::kNumber, proto::DnnGetAttributeRequest::kNumber,
                                      proto::DnnDestroyDescRequest::kNumber};
  for (const auto& call : body.dnn_log) {
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
  }
  return Status::Ok();
}

proto::PreloadDoneRequest Worker::Preload(const proto::ForkPreloadRequest& req, const std::vector<UniqueFd>& chunk_fds) {
  auto t0 = std::chrono::steady_clock::now();
  proto::PreloadDoneRequest done;
  done.golden = req.golden;
  done.generation = req.generation;
  std::vector<PreloadChunk> want;
  proto::ManifestChunkList list;
  proto::Decoder dec(req.chunks);
  Status st;
  if (!proto::DecodeFields(dec, &list) || !dec.done()) st = Malformed("preload chunk list does not decode");
  for (const auto& c : list.chunks) want.push_back({c.addr, c.bytes, c.id});
  std::vector<int> fds;
  for (const auto& fd : chunk_fds) fds.push_back(fd.get());
  if (st.ok()) st = preload_->Update(req.golden, want, fds);
  if (!st.ok()) {
    done.result = st.code() ? st.code() : static_cast<int32_t>(Code::kInternal);
    done.message = st.message();
  }
  done.chunks = static_cast<uint32_t>(preload_->size());
  done.ms = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return done;
}

}  // namespace smolvm
