// The clone's half of a fork: a pooled worker preloads a golden's chunks
// ahead (ForkPreload), then rebuilds the golden's session from its manifest
// (CloneBuild): memory at the same addresses, modules, functions, streams,
// events, cuBLAS and cuDNN handles under the same guest ids.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/hex.h"
#include "worker/worker.h"

namespace smolvm {

Result<proto::CloneBuiltRequest> Worker::BuildClone(const proto::CloneBuildRequest& req,
                                                    const std::vector<UniqueFd>& chunk_fds) {
  auto t0 = std::chrono::steady_clock::now();
  nlohmann::json j = nlohmann::json::parse(req.manifest, nullptr, false);
  if (j.is_discarded()) return Malformed("clone manifest is not JSON");
  std::vector<int> fds;
  for (const auto& fd : chunk_fds) fds.push_back(fd.get());
  double layout_ms = 0;
  uint32_t preloaded = 0;
  try {
    // The golden's chunks this worker imported ahead, if they are that golden's.
    std::map<uint64_t, MappedImport> ahead;
    if (preload_->golden() == req.golden && req.golden != 0) {
      ahead = preload_->Take();
      for (const auto& c : j.at("layout").at("chunks")) {
        auto it = ahead.find(c.at(0).get<uint64_t>());
        preloaded += it != ahead.end() && c.at(2) != 0 && c.size() > 3 && it->second.id == c.at(3).get<uint64_t>();
      }
    } else {
      preload_->Drop();
    }
    RETURN_IF_ERROR(memory_->ImportLayout(j.at("layout"), fds, std::move(ahead)));
    layout_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& m : j.at("modules")) {
      uint64_t id = m.at(0);
      std::string hash = BytesOfHex(m.at(1).get<std::string>());
      // The golden's index entry: the clone is the same tenant.
      RETURN_IF_ERROR(module_cache_.Remember(hash, BytesOfHex(m.at(2).get<std::string>())));
      ASSIGN_OR_RETURN(std::string image, module_cache_.Get(hash));
      ASSIGN_OR_RETURN(uint64_t h, backend_->ModuleLoad(image));
      modules_[id] = ModuleInfo{h, hash};
    }
    for (const auto& f : j.at("functions")) {
      uint64_t id = f.at(0), module = f.at(1);
      std::string name = f.at(2);
      auto mod = modules_.find(module);
      if (mod == modules_.end()) return Malformed("clone manifest names an unknown module");
      ASSIGN_OR_RETURN(uint64_t h, backend_->ModuleGetFunction(mod->second.handle, name));
      functions_[id] = FunctionInfo{h, module, name};
    }
    for (const auto& st : j.at("streams")) {
      uint64_t id = st.at(0);
      uint32_t flags = st.at(1);
      int32_t prio = st.at(2);
      ASSIGN_OR_RETURN(uint64_t h, backend_->StreamCreate(flags, prio));
      streams_[id] = StreamInfo{h, flags, prio};
    }
    for (const auto& ev : j.at("events")) {
      uint64_t id = ev.at(0);
      uint32_t flags = ev.at(1);
      ASSIGN_OR_RETURN(uint64_t h, backend_->EventCreate(flags));
      events_[id] = EventInfo{h, flags};
    }
    // cuBLAS and cuBLASLt handles under the same guest ids, with their stream,
    // modes and workspace (same addresses: the workspace is golden memory).
    if (!j.value("blas", nlohmann::json::array()).empty() || !j.value("lt", nlohmann::json::array()).empty()) {
      ASSIGN_OR_RETURN(BlasBackend * blas, Blas());
      for (const auto& b : j.value("blas", nlohmann::json::array())) {
        BlasHandleInfo info;
        uint64_t id = b.at(0);
        info.stream = b.at(1);
        ASSIGN_OR_RETURN(info.handle, blas->Create());
        blas_handles_[id] = info;
        BlasHandleInfo& rec = blas_handles_[id];
        if (info.stream != 0) {
          ASSIGN_OR_RETURN(uint64_t s, Stream(info.stream));
          RETURN_IF_ERROR(blas->SetStream(rec.handle, s));
        }
        for (const auto& m : b.at(2)) {
          uint32_t what = m.at(0);
          int32_t value = m.at(1);
          RETURN_IF_ERROR(blas->SetMode(rec.handle, static_cast<BlasMode>(what), value));
          rec.modes[what] = value;
        }
        rec.workspace = b.at(3);
        rec.workspace_bytes = b.at(4);
        if (rec.workspace_bytes) RETURN_IF_ERROR(blas->SetWorkspace(rec.handle, rec.workspace, rec.workspace_bytes));
      }
      for (const auto& l : j.value("lt", nlohmann::json::array())) {
        ASSIGN_OR_RETURN(uint64_t h, blas->LtCreate());
        lt_handles_[l.get<uint64_t>()] = h;
      }
    }
    // cuDNN handles and finalized descriptors (plans too) under the same ids.
    if (j.contains("dnn")) RETURN_IF_ERROR(DnnRebuild(j.at("dnn")));
  } catch (const nlohmann::json::exception& e) {
    return Malformed(std::string("clone manifest: ") + e.what());
  }
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
  std::fprintf(stderr, "smolvm worker %d: clone build: memory %.1f ms (%u shared chunks preloaded), total %.1f ms\n",
               ::getpid(), layout_ms, preloaded, static_cast<double>(built.ms));
  return built;
}

proto::PreloadDoneRequest Worker::Preload(const proto::ForkPreloadRequest& req, const std::vector<UniqueFd>& chunk_fds) {
  auto t0 = std::chrono::steady_clock::now();
  proto::PreloadDoneRequest done;
  done.golden = req.golden;
  done.generation = req.generation;
  std::vector<PreloadChunk> want;
  nlohmann::json j = nlohmann::json::parse(req.chunks, nullptr, false);
  Status st;
  try {
    if (j.is_discarded() || !j.is_array()) throw std::invalid_argument("not a JSON array");
    for (const auto& c : j) want.push_back({c.at(0), c.at(1), c.at(2)});
  } catch (const std::exception& e) {
    st = Malformed(std::string("preload chunk list: ") + e.what());
  }
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
