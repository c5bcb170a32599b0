// The clone's half of a fork: a pooled worker preloads a golden's chunks
// ahead (ForkPreload) and, in the golden's jail, its modules, functions,
// streams, events and cuDNN state (worker_fork_clone_setup.cc), then
// rebuilds the golden's session from its manifest (CloneBuild): memory at the
// same addresses, the rest of those objects, cuBLAS handles, all under the
// same guest ids.
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <iterator>

#include "base/diagnostics.h"
#include "daemon/machine_budget.h"
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
  RETURN_IF_ERROR(ApplyLimits(j));
  double layout_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // Modules, functions, streams, events and cuDNN state: what this worker
  // made ahead for this golden stays where it matches (worker_fork_clone_setup.cc).
  // What the machine's budget could not take of it (charged when the budget
  // came, BudgetedBackend::SetBudget) goes too: made again under the budget,
  // it fails as a clone build without a preload would.
  auto* budgeted = dynamic_cast<BudgetedBackend*>(backend_.get());
  const bool setup_ahead =
      setup_golden_ == req.golden && req.golden != 0 && (budgeted == nullptr || budgeted->unpaid() == 0);
  if (!setup_ahead) DropSetup();
  setup_golden_ = 0;
  SetupCounts setup;
  RETURN_IF_ERROR(ApplySetup(j, &setup));
  RETURN_IF_ERROR(ApplyGlobals(j));  // the golden's values, where this context's driver put them
  auto ms_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
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
  // Graphs and executables under the same ids, with this context's
  // kernels: replayed once the guest registered its pinned memory again.
  const size_t graph_calls = j.graph_log.size();
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
  // scripts/fork_timeline.py parses this line: keep "<part> <x> ms (...)".
  std::fprintf(Diagnostics(),
               "smolvm worker %d: clone build: memory %.1f ms (%u shared chunks preloaded), modules %.1f ms (%zu: %u "
               "loaded, %u preloaded), blas %.1f ms, dnn %.1f ms (%zu calls: %u replayed, %u preloaded), total %.1f ms "
               "(%zu graph calls to replay)\n",
               ::getpid(), layout_ms, preloaded, setup.modules_ms, j.modules.size(), setup.modules_loaded,
               setup.modules_kept, blas_ms, setup.dnn_ms, j.dnn_log.size(), setup.dnn_replayed, setup.dnn_kept,
               static_cast<double>(built.ms), graph_calls);
  if (graph_calls != 0) graph_replay_ = std::make_unique<proto::ForkManifestBody>(std::move(j));
  return built;
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
  double chunks_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // The objects a clone rebuilds: only in the golden's jail (a worker that
  // may serve another tenant holds nothing of this one's but its chunks,
  // which it drops before serving anyone else).
  if (setup_golden_ != 0 && setup_golden_ != req.golden) DropSetup();
  if (st.ok() && req.jail != 0 && !req.setup.empty()) {
    proto::ForkManifestBody setup;
    SetupCounts counts;
    Status made = proto::DecodeManifest(req.setup, &setup) ? ApplySetup(setup, &counts)
                                                            : Malformed("preload setup does not decode");
    if (made.ok()) {
      setup_golden_ = req.golden;
      done.modules = static_cast<uint32_t>(modules_.size());
      done.dnn_calls = static_cast<uint32_t>(dnn_.log.size());
    } else {
      DropSetup();  // a clone build makes all of it then, and says why if it cannot
      done.setup_message = made.ToString();
    }
    std::fprintf(Diagnostics(),
                 "smolvm worker %d: fork preload of session %llu: %u chunks %.1f ms, modules %.1f ms (%u loaded, %u "
                 "kept), dnn %.1f ms (%u calls replayed, %u kept)%s%s\n",
                 ::getpid(), static_cast<unsigned long long>(req.golden), done.chunks, chunks_ms, counts.modules_ms,
                 counts.modules_loaded, counts.modules_kept, counts.dnn_ms, counts.dnn_replayed, counts.dnn_kept,
                 made.ok() ? "" : "; setup failed, dropped: ", done.setup_message.c_str());
  } else {
    DropSetup();
  }
  done.ms = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return done;
}

}  // namespace smolvm
