// The fake cuDNN's engines (dnn_fake_internal.h) and what heuristics,
// engines, engine configs and plans compute from them: the attributes
// cudnn-frontend reads between heuristics and execute.
#include <cudnn_graph.h>

#include <string>
#include <vector>

#include "backend/dnn_fake_internal.h"

namespace smolvm {
namespace fake_dnn {

// Engine 0 declares RUNTIME_COMPILATION as cuDNN's runtime-fusion engines
// do (it takes its graph apart when a plan is finalized, any supported
// pattern); engine 1 accumulates in fp32, hence REDUCED_PRECISION_REDUCTION.
const std::vector<Engine>& Engines() {
  static const std::vector<Engine> engines = {
      {0,
       {},
       {CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION},
       {{CUDNN_KNOB_TYPE_TILE_SIZE, 0, 2, 1, 1}, {CUDNN_KNOB_TYPE_STAGES, 1, 4, 1, 2}},
       kWorkspacePerMatmul,
       48 << 10,
       false},
      {1,
       {CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION},
       {},
       {{CUDNN_KNOB_TYPE_TILE_SIZE, 0, 2, 1, 0}},
       0,
       16 << 10,
       true},
  };
  return engines;
}

const Engine* EngineAt(int64_t index) {
  const std::vector<Engine>& all = Engines();
  return index >= 0 && index < static_cast<int64_t>(all.size()) ? &all[index] : nullptr;
}

namespace {

// Heuristics' engines for `mode`, best first.
std::vector<int64_t> Recommend(int32_t mode) {
  if (mode == CUDNN_HEUR_MODE_FALLBACK) return {1};
  return {0, 1};
}

// The count of `n` elements of `bytes` each at `data`, and at most
// `requested` of them when the caller gave an element array.
void Put(const void* data, int64_t n, size_t bytes, int64_t requested, int64_t* count,
         void* values) {
  *count = n;
  int64_t m = std::min(n, requested);
  if (values != nullptr && m > 0) std::memcpy(values, data, static_cast<size_t>(m) * bytes);
}

Status WantType(uint32_t type, uint32_t want) {
  if (type == want) return Status::Ok();
  return DnnError(
      CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE,
      "fake cuDNN: attribute type " + std::to_string(type) + ", expected " + std::to_string(want));
}

}  // namespace
}  // namespace fake_dnn

using namespace fake_dnn;

Status FakeDnnBackend::ValidateEngine(const Desc& engine) const {
  RETURN_IF_ERROR(
      Ref(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)
          .status());
  auto index = engine.attrs.find(CUDNN_ATTR_ENGINE_GLOBAL_INDEX);
  if (index == engine.attrs.end()) return Bad("engine without a global index");
  if (EngineAt(First<int64_t>(index->second)) == nullptr)
    return Bad("no engine " + std::to_string(First<int64_t>(index->second)) + " (the fake has " +
               std::to_string(Engines().size()) + ")");
  return Status::Ok();
}

Status FakeDnnBackend::ValidateConfig(const Desc& cfg) const {
  ASSIGN_OR_RETURN(int64_t index, ConfigEngine(cfg));
  const Engine& engine = *EngineAt(index);
  auto choices = cfg.attrs.find(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES);
  if (choices == cfg.attrs.end()) return Status::Ok();
  for (size_t i = 0; i < choices->second.values.size() / 8; ++i) {
    auto k = descs_.find(RefAt(choices->second, i));
    if (k == descs_.end() || k->second.type != CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR)
      return DnnError(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE,
                      "fake cuDNN: knob choices must be knob choice descriptors");
    int32_t type = First<int32_t>(k->second.attrs.at(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE));
    int64_t value = First<int64_t>(k->second.attrs.at(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE));
    const Knob* knob = nullptr;
    for (const Knob& kn : engine.knobs)
      if (kn.type == type) knob = &kn;
    if (knob == nullptr || value < knob->min || value > knob->max ||
        (value - knob->min) % knob->stride != 0)
      return DnnError(CUDNN_STATUS_NOT_SUPPORTED, "fake cuDNN: engine " + std::to_string(index) +
                                                      " takes no knob " + std::to_string(type) +
                                                      " = " + std::to_string(value));
  }
  return Status::Ok();
}

Result<int64_t> FakeDnnBackend::ConfigEngine(const Desc& cfg) const {
  ASSIGN_OR_RETURN(const Desc* engine,
                   Ref(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_BACKEND_ENGINE_DESCRIPTOR));
  return First<int64_t>(engine->attrs.at(CUDNN_ATTR_ENGINE_GLOBAL_INDEX));
}

Result<const FakeDnnBackend::Desc*> FakeDnnBackend::GraphOf(const Desc& cfg) const {
  ASSIGN_OR_RETURN(const Desc* engine,
                   Ref(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_BACKEND_ENGINE_DESCRIPTOR));
  return Ref(*engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
}

Result<const FakeDnnBackend::Desc*> FakeDnnBackend::PlanConfig(const Desc& plan) const {
  return Ref(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
}

Result<int64_t> FakeDnnBackend::ConfigWorkspace(const Desc& cfg) const {
  ASSIGN_OR_RETURN(int64_t index, ConfigEngine(cfg));
  ASSIGN_OR_RETURN(const Desc* graph, GraphOf(cfg));
  const Attr& ops = graph->attrs.at(CUDNN_ATTR_OPERATIONGRAPH_OPS);
  int64_t matmuls = 0;
  for (size_t i = 0; i < ops.values.size() / 8; ++i) {
    auto op = descs_.find(RefAt(ops, i));
    matmuls += op != descs_.end() && op->second.type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR;
  }
  return matmuls * EngineAt(index)->workspace_per_matmul;
}

Status FakeDnnBackend::FillConfig(uint64_t out, const Attr& graph, int64_t index) {
  Desc* cfg = Live(out);
  if (cfg == nullptr || cfg->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
    return DnnError(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE,
                    "fake cuDNN: heuristics results need engine configs");
  const Engine& e = *EngineAt(index);
  // What the config references is the library's own: no caller holds it.
  ASSIGN_OR_RETURN(uint64_t eng, DescCreate(CUDNN_BACKEND_ENGINE_DESCRIPTOR));
  Desc& engine = descs_[eng];
  engine.attrs[CUDNN_ATTR_ENGINE_OPERATION_GRAPH] = graph;
  engine.attrs[CUDNN_ATTR_ENGINE_GLOBAL_INDEX] = Int64Attr(index);
  engine.finalized = engine.destroyed = true;
  Attr choices{CUDNN_TYPE_BACKEND_DESCRIPTOR, ""};
  for (const Knob& k : e.knobs) {
    ASSIGN_OR_RETURN(uint64_t kc, DescCreate(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR));
    Desc& choice = descs_[kc];
    choice.attrs[CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE] =
        Attr{CUDNN_TYPE_KNOB_TYPE, std::string(reinterpret_cast<const char*>(&k.type), 4)};
    choice.attrs[CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE] = Int64Attr(k.choice);
    choice.finalized = choice.destroyed = true;
    choices.values.append(reinterpret_cast<const char*>(&kc), 8);
  }
  cfg->attrs.clear();
  cfg->attrs[CUDNN_ATTR_ENGINECFG_ENGINE] =
      Attr{CUDNN_TYPE_BACKEND_DESCRIPTOR, std::string(reinterpret_cast<const char*>(&eng), 8)};
  if (!choices.values.empty()) cfg->attrs[CUDNN_ATTR_ENGINECFG_KNOB_CHOICES] = choices;
  cfg->finalized = true;
  return Status::Ok();
}

Status FakeDnnBackend::EngineGet(const Desc& d, uint32_t name, uint32_t type, int64_t requested,
                                 int64_t* count, void* values, bool* handled) {
  *handled = true;
  auto* outs = static_cast<uint64_t*>(values);
  if (d.type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR && name == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
    RETURN_IF_ERROR(WantType(type, CUDNN_TYPE_BACKEND_DESCRIPTOR));
    std::vector<int64_t> engines =
        Recommend(First<int32_t>(d.attrs.at(CUDNN_ATTR_ENGINEHEUR_MODE)));
    *count = static_cast<int64_t>(engines.size());
    for (int64_t i = 0; values != nullptr && i < std::min(*count, requested); ++i)
      RETURN_IF_ERROR(
          FillConfig(outs[i], d.attrs.at(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH), engines[i]));
    return Status::Ok();
  }
  if (d.type == CUDNN_BACKEND_ENGINE_DESCRIPTOR &&
      (name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE || name == CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE ||
       name == CUDNN_ATTR_ENGINE_KNOB_INFO)) {
    const Engine& e = *EngineAt(First<int64_t>(d.attrs.at(CUDNN_ATTR_ENGINE_GLOBAL_INDEX)));
    if (name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE) {
      RETURN_IF_ERROR(WantType(type, CUDNN_TYPE_NUMERICAL_NOTE));
      Put(e.numerical_notes.data(), static_cast<int64_t>(e.numerical_notes.size()), 4, requested,
          count, values);
      return Status::Ok();
    }
    if (name == CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE) {
      RETURN_IF_ERROR(WantType(type, CUDNN_TYPE_BEHAVIOR_NOTE));
      Put(e.behavior_notes.data(), static_cast<int64_t>(e.behavior_notes.size()), 4, requested,
          count, values);
      return Status::Ok();
    }
    RETURN_IF_ERROR(WantType(type, CUDNN_TYPE_BACKEND_DESCRIPTOR));
    *count = static_cast<int64_t>(e.knobs.size());
    for (int64_t i = 0; values != nullptr && i < std::min(*count, requested); ++i) {
      Desc* info = Live(outs[i]);
      if (info == nullptr || info->type != CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR)
        return DnnError(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE,
                        "fake cuDNN: knob infos need knob info descriptors");
      const Knob& k = e.knobs[i];
      info->attrs.clear();
      info->attrs[CUDNN_ATTR_KNOB_INFO_TYPE] =
          Attr{CUDNN_TYPE_KNOB_TYPE, std::string(reinterpret_cast<const char*>(&k.type), 4)};
      info->attrs[CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE] = Int64Attr(k.min);
      info->attrs[CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE] = Int64Attr(k.max);
      info->attrs[CUDNN_ATTR_KNOB_INFO_STRIDE] = Int64Attr(k.stride);
      info->finalized = true;
    }
    return Status::Ok();
  }
  if (d.type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) {
    if (name == CUDNN_ATTR_ENGINECFG_KNOB_CHOICES && !d.attrs.count(name)) {
      RETURN_IF_ERROR(WantType(type, CUDNN_TYPE_BACKEND_DESCRIPTOR));
      *count = 0;
      return Status::Ok();
    }
    if (name == CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE) {
      RETURN_IF_ERROR(WantType(type, CUDNN_TYPE_INT64));
      ASSIGN_OR_RETURN(int64_t ws, ConfigWorkspace(d));
      Put(&ws, 1, 8, requested, count, values);
      return Status::Ok();
    }
    if (name == CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED) {
      RETURN_IF_ERROR(WantType(type, CUDNN_TYPE_INT32));
      ASSIGN_OR_RETURN(int64_t index, ConfigEngine(d));
      Put(&EngineAt(index)->shared_memory, 1, 4, requested, count, values);
      return Status::Ok();
    }
  }
  if (d.type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR &&
      (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE ||
       name == CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION)) {
    ASSIGN_OR_RETURN(const Desc* cfg, PlanConfig(d));
    ASSIGN_OR_RETURN(int64_t ws, ConfigWorkspace(*cfg));
    if (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) {
      RETURN_IF_ERROR(WantType(type, CUDNN_TYPE_INT64));
      Put(&ws, 1, 8, requested, count, values);
      return Status::Ok();
    }
    RETURN_IF_ERROR(WantType(type, CUDNN_TYPE_CHAR));
    ASSIGN_OR_RETURN(int64_t index, ConfigEngine(*cfg));
    std::string json = "{\"fake_engine\":" + std::to_string(index) + ",\"knobs\":{";
    if (auto choices = cfg->attrs.find(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES);
        choices != cfg->attrs.end())
      for (size_t i = 0; i < choices->second.values.size() / 8; ++i) {
        const Desc& k = descs_.at(RefAt(choices->second, i));
        json +=
            (i ? ",\"" : "\"") +
            std::to_string(First<int32_t>(k.attrs.at(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE))) +
            "\":" + std::to_string(First<int64_t>(k.attrs.at(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE)));
      }
    json += "},\"workspace\":" + std::to_string(ws) + "}";
    Put(json.data(), static_cast<int64_t>(json.size()), 1, requested, count, values);
    return Status::Ok();
  }
  if (d.type == CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR &&
      name == CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT) {
    RETURN_IF_ERROR(WantType(type, CUDNN_TYPE_INT64));
    int64_t n = static_cast<int64_t>(Engines().size());
    Put(&n, 1, 8, requested, count, values);
    return Status::Ok();
  }
  *handled = false;
  return Status::Ok();
}

}  // namespace smolvm
