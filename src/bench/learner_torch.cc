#include "bench/learner_torch.h"

#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "bench/child.h"

namespace smolvm::bench {

namespace fs = std::filesystem;

std::string DefaultTorchPython() {
  const char* venv = "/opt/torch/.venv/bin/python3";
  return ::access(venv, X_OK) == 0 ? venv : "python3";
}

std::string TorchLearnerScript() {
  const char* over = std::getenv("SMOLVM_TORCH_LEARNER");
  if (over != nullptr && over[0] != '\0') return over;
  std::string self = SelfExe();
  std::string beside = self.substr(0, self.rfind('/')) + "/torch-learner/peft_dpo.py";
  std::error_code ec;
  if (fs::exists(beside, ec)) return beside;
  return std::string(SMOLVM_SOURCE_DIR) + "/bench/peers/peft_dpo.py";
}

namespace {

std::string LastLine(const std::string& text) {
  size_t end = text.find_last_not_of("\n ");
  if (end == std::string::npos) return "";
  size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start == std::string::npos ? 0 : start + 1));
}

bool SeenInEveryMachine(const std::string& dir) {
  return dir.empty() || dir == "/" || dir == "/usr" || dir.rfind("/usr/", 0) == 0;
}

}  // namespace

Result<TorchProbe> ProbeTorch(const std::string& python, const std::string& script) {
  std::error_code ec;
  if (!fs::is_regular_file(script, ec))
    return NotFound("--learner torch: no learner script at " + script + " (set SMOLVM_TORCH_LEARNER to bench/peers/peft_dpo.py)");
  auto py = FindOnPath(python);
  if (!py.ok()) return NotFound("--python " + python + ": " + py.status().message());
  ASSIGN_OR_RETURN(CommandOutput r, RunCommand({*py, script, "--probe"}, 120 * 1000));
  if (r.rc == 3)
    return NotFound("--learner torch: " + LastLine(r.err));
  if (r.rc != 0)
    return NotFound("--learner torch: '" + *py + " " + script + " --probe' failed (exit " + std::to_string(r.rc) +
                    "): " + LastLine(r.err.empty() ? r.out : r.err));
  auto j = nlohmann::json::parse(LastLine(r.out), nullptr, false);
  if (!j.is_object())
    return Internal("--learner torch: '" + script + " --probe' printed no JSON line: " + LastLine(r.out));
  TorchProbe p;
  // sys.executable: a venv's own bin/python3 as given, but the interpreter
  // behind a wrapper (pyenv's shims are scripts a machine cannot see).
  p.python = j.value("python", fs::absolute(*py).string());
  p.script = fs::absolute(script).lexically_normal().string();
  p.torch = j.value("torch", "");
  p.transformers = j.value("transformers", "");
  p.peft = j.value("peft", "");
  p.purelib = j.value("purelib", "");
  p.prefix = j.value("prefix", "");
  p.base_prefix = j.value("base_prefix", "");
  return p;
}

std::vector<machine::Volume> TorchVolumes(const TorchProbe& probe) {
  std::vector<machine::Volume> v;
  for (const std::string& dir : {probe.prefix, probe.base_prefix}) {
    if (SeenInEveryMachine(dir)) continue;
    bool dup = false;
    for (const auto& have : v) dup = dup || have.host == dir;
    if (!dup) v.push_back({dir, dir, true});
  }
  return v;
}

std::string TorchCudaLibs(const TorchProbe& probe) {
  std::string libs;
  std::error_code ec;
  for (const char* sub : {"/nvidia/cu13/lib", "/nvidia/cudnn/lib"}) {
    std::string d = probe.purelib + sub;
    if (!probe.purelib.empty() && fs::is_directory(d, ec)) libs += (libs.empty() ? "" : ":") + d;
  }
  return libs;
}

void AddTorchToMachine(const TorchProbe& probe, machine::MachineSpec* spec) {
  for (auto& v : TorchVolumes(probe)) spec->volumes.push_back(std::move(v));
  spec->env.push_back("PYTHONUNBUFFERED=1");
  // The learner's no-torch mode (its tests), as the native arm's learners inherit it.
  if (const char* dry = std::getenv("SMOLVM_TORCH_DRY_RUN"); dry != nullptr && dry[0] != '\0')
    spec->env.push_back(std::string("SMOLVM_TORCH_DRY_RUN=") + dry);
}

}  // namespace smolvm::bench
