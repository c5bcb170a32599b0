#include "bench/results.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace smolvm::bench {
namespace {

using json = nlohmann::json;

bool IsDelimiter(char c) {
  return c == ',' || c == ':' || c == '[' || c == '{' || c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// A number from a number, a numeric or NaN/Infinity string, or NaN for
// null, absent and anything else.
double Num(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "NaN") return kNaN;
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0') return d;
  }
  return kNaN;
}
double Num(const json& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() ? kNaN : Num(*it);
}
int Int(const json& o, const char* key, int fallback) {
  double d = Num(o, key);
  return std::isfinite(d) ? static_cast<int>(d) : fallback;
}
std::string Str(const json& o, const char* key, const std::string& fallback = "") {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return fallback;
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
}
bool Bool(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end()) return false;
  if (it->is_boolean()) return it->get<bool>();
  if (it->is_number()) return Num(*it) != 0;
  if (it->is_string()) return *it == "1" || *it == "true";
  return false;
}
// The lid as text: 3 -> "3", "3" -> "3".
std::string Lid(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) {
    double d = v.get<double>();
    if (d == std::floor(d) && std::fabs(d) < 1e15) return std::to_string(static_cast<int64_t>(d));
  }
  return v.is_null() ? "" : v.dump();
}

LearnerResult ParseLearner(const json& l) {
  LearnerResult r;
  r.lid = l.contains("lid") ? Lid(l["lid"]) : "";
  r.tok_s = Num(l, "tok_s");
  r.train_s = Num(l, "train_s");
  r.step_ms = Num(l, "step_ms");
  r.loss0 = Num(l, "loss0");
  r.lossN = Num(l, "lossN");
  r.peak_gb = Num(l, "peak_gb");
  r.load_s = Num(l, "load_s");
  r.t_done = Num(l, "t_done");
  r.peak_rss_mib = Num(l, "peak_rss_mib");
  if (auto it = l.find("losses"); it != l.end() && it->is_array())
    for (const auto& x : *it) r.losses.push_back(Num(x));
  // A loss that is there but null or non-finite is nan; an absent one is unknown.
  auto bad = [&](const char* k) { return l.contains(k) && !std::isfinite(Num(l, k)); };
  r.loss_nan = bad("loss0") || bad("lossN");
  return r;
}

// Written in the seed's field order.
using ordered = nlohmann::ordered_json;

ordered LearnerJson(const LearnerResult& l) {
  ordered j = {{"lid", l.lid},           {"tok_s", l.tok_s}, {"train_s", l.train_s},
            {"step_ms", l.step_ms},   {"loss0", l.loss0}, {"lossN", l.lossN},
            {"peak_gb", l.peak_gb},   {"load_s", l.load_s}};
  // Our lids are numbers; write them as numbers like the seed's native arm.
  char* end = nullptr;
  long long v = std::strtoll(l.lid.c_str(), &end, 10);
  if (!l.lid.empty() && end && *end == '\0') j["lid"] = v;
  if (!std::isnan(l.peak_rss_mib)) j["peak_rss_mib"] = l.peak_rss_mib;
  if (std::isfinite(l.t_done)) j["t_done"] = l.t_done;
  j["losses"] = l.losses;
  return j;
}

// Like json::dump, but a non-finite float is written as NaN / Infinity /
// -Infinity (nlohmann would write null).
template <typename J>
void Dump(const J& j, int indent, int depth, std::string* out) {
  std::string pad(static_cast<size_t>(indent * (depth + 1)), ' ');
  std::string end_pad(static_cast<size_t>(indent * depth), ' ');
  if (j.is_number_float()) {
    double d = j.template get<double>();
    if (std::isnan(d)) *out += "NaN";
    else if (std::isinf(d)) *out += d > 0 ? "Infinity" : "-Infinity";
    else *out += j.dump();
  } else if (j.is_object() && !j.empty()) {
    *out += "{\n";
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) *out += ",\n";
      first = false;
      *out += pad + J(it.key()).dump() + ": ";
      Dump(it.value(), indent, depth + 1, out);
    }
    *out += "\n" + end_pad + "}";
  } else if (j.is_array() && !j.empty()) {
    // Arrays of scalars stay on one line (per-step losses).
    bool scalars = true;
    for (const auto& x : j) scalars &= !x.is_structured();
    *out += scalars ? "[" : "[\n";
    bool first = true;
    for (const auto& x : j) {
      if (!first) *out += scalars ? ", " : ",\n";
      first = false;
      if (!scalars) *out += pad;
      Dump(x, indent, depth + 1, out);
    }
    *out += scalars ? "]" : "\n" + end_pad + "]";
  } else {
    *out += j.dump();
  }
}

}  // namespace

std::string QuoteNonFiniteTokens(const std::string& text) {
  std::string out;
  out.reserve(text.size() + 16);
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    bool boundary = i == 0 || IsDelimiter(text[i - 1]);
    const char* tokens[] = {"-Infinity", "Infinity", "NaN"};
    bool replaced = false;
    for (const char* t : tokens) {
      size_t n = std::char_traits<char>::length(t);
      if (boundary && text.compare(i, n, t) == 0) {
        out += '"';
        out += t;
        out += '"';
        i += n - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

Result<RunResult> ParseRunResult(const std::string& text) {
  json j = json::parse(QuoteNonFiniteTokens(text), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Malformed("not valid JSON");
  if (!j.is_object()) return Malformed("not a JSON object");
  RunResult r;
  r.arm = Str(j, "arm");
  if (r.arm.empty()) return Malformed("no \"arm\" field (not a bench result)");
  r.schema = Int(j, "schema", 0);
  r.n = Int(j, "n", 0);
  r.steps = Int(j, "steps", 0);
  r.batch = Int(j, "batch", 0);
  r.maxseq = Int(j, "maxseq", 0);
  r.rep = Int(j, "rep", 0);
  r.cpus_per_learner = Num(j, "cpus_per_learner");
  if (std::isnan(r.cpus_per_learner)) r.cpus_per_learner = 0;
  r.cold_cache = Bool(j, "cold_cache");
  r.share_mode = Str(j, "share_mode", "default");
  if (j.contains("share_weights_env") && !j["share_weights_env"].is_null())
    r.share_weights_env = Str(j, "share_weights_env");
  if (double s = Num(j, "shared_ranges"); std::isfinite(s)) r.shared_ranges = static_cast<int64_t>(s);
  r.wall_s = Num(j, "wall_s");
  r.golden_load_s = Num(j, "golden_load_s");
  r.fork_s = Num(j, "fork_s");
  r.peak_gpu_mib = Num(j, "peak_gpu_mib");
  r.agg_tok_s = Num(j, "agg_tok_s");
  if (auto it = j.find("learners"); it != j.end() && it->is_array())
    for (const auto& l : *it)
      if (l.is_object()) r.learners.push_back(ParseLearner(l));
  r.learners_done = Int(j, "learners_done", static_cast<int>(r.learners.size()));
  r.learners_expected = Int(j, "learners_expected", r.n);
  if (auto it = j.find("env"); it != j.end() && it->is_object()) {
    const json& e = *it;
    r.env.smolvm_version = Str(e, "smolvm_version");
    r.env.smolvm_binary_sha256 = Str(e, "smolvm_binary_sha256");
    r.env.proto_hash = Str(e, "proto_hash");
    r.env.shim_sha256 = Str(e, "shim_sha256");
    r.env.driver = Str(e, "driver");
    r.env.gpu = Str(e, "gpu");
    r.env.cuda = Str(e, "cuda");
    r.env.host_cores = Int(e, "host_cores", 0);
    r.env.host_mem_gb = Num(e, "host_mem_gb");
    if (auto m = e.find("mps"); m != e.end() && m->is_object()) {
      MpsRecord& mps = r.env.mps;
      mps.mode = Str(*m, "mode", "off");
      mps.control = Str(*m, "control");
      mps.pipe_dir = Str(*m, "pipe_dir");
      mps.log_dir = Str(*m, "log_dir");
      double pid = Num(*m, "control_pid");
      mps.control_pid = std::isfinite(pid) ? static_cast<int64_t>(pid) : 0;
      mps.stopped = Str(*m, "stopped");
      if (auto sp = m->find("server_pids"); sp != m->end() && sp->is_array())
        for (const auto& x : *sp)
          if (std::isfinite(Num(x))) mps.server_pids.push_back(static_cast<int64_t>(Num(x)));
      mps.max_clients = Int(*m, "max_clients", 0);
    }
  }
  r.model = Str(j, "model");
  r.load_in_4bit = Bool(j, "load_in_4bit");
  r.method = Str(j, "method", "dpo");
  r.learner = Str(j, "learner", "smolvm-learner");
  r.device = Str(j, "device", "cuda");
  r.control_check = Str(j, "control_check");
  if (auto it = j.find("process_peaks"); it != j.end() && it->is_array())
    for (const auto& p : *it)
      if (p.is_object()) r.process_peaks.push_back({static_cast<int64_t>(Num(p, "pid")), Str(p, "what"), Num(p, "peak_mib")});
  if (auto it = j.find("clones"); it != j.end() && it->is_array())
    for (const auto& c : *it)
      if (c.is_object())
        r.clones.push_back({Int(c, "index", -1), static_cast<int64_t>(Num(c, "shared")), static_cast<int64_t>(Num(c, "private")),
                            Num(c, "shared_mib"), Num(c, "private_mib"), Num(c, "ms"), Num(c, "build_ms"),
                            Int(c, "preloaded", -1)});
  r.golden_learner_load_s = Num(j, "golden_learner_load_s");
  r.preload_wait_s = Num(j, "preload_wait_s");
  r.worker_preload = Str(j, "worker_preload");
  r.started_at = Str(j, "started_at");
  r.timed_out = Bool(j, "timed_out");
  r.note = Str(j, "note");
  if (auto it = j.find("learner_errors"); it != j.end() && it->is_array())
    for (const auto& e : *it)
      if (e.is_object()) r.learner_errors.push_back({Str(e, "lid"), Str(e, "line"), Str(e, "log")});
  r.command = Str(j, "command");
  r.fork_requests = Str(j, "fork_requests");
  r.fork_requests_probe = Str(j, "fork_requests_probe");
  return r;
}

std::string FormatRunResult(const RunResult& r) {
  ordered j;
  j["schema"] = r.schema;
  j["arm"] = r.arm;
  j["n"] = r.n;
  j["steps"] = r.steps;
  j["rep"] = r.rep;
  j["cpus_per_learner"] = r.cpus_per_learner;
  j["cold_cache"] = r.cold_cache;
  j["batch"] = r.batch;
  j["maxseq"] = r.maxseq;
  j["model"] = r.model;
  j["load_in_4bit"] = r.load_in_4bit;
  j["method"] = r.method;
  j["learner"] = r.learner;
  j["device"] = r.device;
  BaseWeights base = BaseOf(r.load_in_4bit);
  j["base"] = {{"precision", base.precision}, {"quality", base.quality}};
  j["share_mode"] = r.share_mode;
  j["share_weights_env"] = r.share_weights_env ? ordered(*r.share_weights_env) : ordered(nullptr);
  j["shared_ranges"] = r.shared_ranges ? ordered(*r.shared_ranges) : ordered(nullptr);
  j["control_check"] = r.control_check;
  j["wall_s"] = r.wall_s;
  j["golden_load_s"] = r.golden_load_s;
  j["golden_learner_load_s"] = r.golden_learner_load_s;
  j["preload_wait_s"] = r.preload_wait_s;
  if (!r.worker_preload.empty()) j["worker_preload"] = r.worker_preload;
  j["fork_s"] = r.fork_s;
  j["peak_gpu_mib"] = r.peak_gpu_mib;
  j["learners_done"] = r.learners_done;
  j["learners_expected"] = r.learners_expected;
  j["agg_tok_s"] = r.agg_tok_s;
  j["timed_out"] = r.timed_out;
  j["note"] = r.note;
  j["started_at"] = r.started_at;
  j["command"] = r.command;
  if (r.arm == "fork") {
    j["fork_requests"] = r.fork_requests;
    j["fork_requests_probe"] = r.fork_requests_probe;
  }
  j["learner_errors"] = ordered::array();
  for (const auto& e : r.learner_errors) j["learner_errors"].push_back({{"lid", e.lid}, {"line", e.line}, {"log", e.log}});
  j["learners"] = ordered::array();
  for (const auto& l : r.learners) j["learners"].push_back(LearnerJson(l));
  j["clones"] = ordered::array();
  for (const auto& c : r.clones)
    j["clones"].push_back({{"index", c.index}, {"shared", c.shared_chunks}, {"private", c.private_chunks},
                           {"shared_mib", c.shared_mib}, {"private_mib", c.private_mib}, {"ms", c.ms},
                           {"build_ms", c.build_ms}, {"preloaded", c.preloaded}});
  j["process_peaks"] = ordered::array();
  for (const auto& p : r.process_peaks)
    j["process_peaks"].push_back({{"pid", p.pid}, {"what", p.what}, {"peak_mib", p.peak_mib}});
  const EnvManifest& e = r.env;
  j["env"] = {{"smolvm_version", e.smolvm_version}, {"smolvm_binary_sha256", e.smolvm_binary_sha256},
              {"proto_hash", e.proto_hash},         {"shim_sha256", e.shim_sha256},
              {"driver", e.driver},                 {"gpu", e.gpu},
              {"cuda", e.cuda},                     {"host_cores", e.host_cores},
              {"host_mem_gb", e.host_mem_gb}};
  if (e.mps.mode == "off") {
    j["env"]["mps"] = {{"mode", "off"}};
  } else {
    j["env"]["mps"] = {{"mode", e.mps.mode},           {"control", e.mps.control},
                       {"pipe_dir", e.mps.pipe_dir},   {"log_dir", e.mps.log_dir},
                       {"control_pid", e.mps.control_pid}, {"stopped", e.mps.stopped},
                       {"server_pids", e.mps.server_pids}, {"max_clients", e.mps.max_clients}};
  }
  std::string out;
  Dump(j, 2, 0, &out);
  return out + "\n";
}

BaseWeights BaseOf(bool load_in_4bit) {
  if (load_in_4bit)
    return {"nf4", "NF4 4-bit, block 64 (bitsandbytes bnb-4bit), quantized at load from the bf16 checkpoint: lossy"};
  return {"bf16", "bf16, the checkpoint's own weights: full precision"};
}

int NanLearners(const RunResult& r) {
  int k = 0;
  for (const auto& l : r.learners) k += l.loss_nan ? 1 : 0;
  return k;
}

Result<std::vector<LoadedResult>> LoadResultDir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFound("results directory '" + dir + "' does not exist");
  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".json") paths.push_back(e.path().string());
  if (ec) return ErrnoStatus("cannot list " + dir, ec.value());
  std::sort(paths.begin(), paths.end());
  std::vector<LoadedResult> out;
  for (const auto& p : paths) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in) return ErrnoStatus("cannot read " + p, errno);
    auto r = ParseRunResult(ss.str());
    if (!r.ok()) return Malformed(p + ": " + r.status().message());
    out.push_back({p, std::move(r).value()});
  }
  return out;
}

Result<std::vector<RunResult>> LoadRunResults(const std::string& dir) {
  ASSIGN_OR_RETURN(auto loaded, LoadResultDir(dir));
  std::vector<RunResult> out;
  for (auto& l : loaded) out.push_back(std::move(l.result));
  return out;
}

std::string ResultFileName(const RunResult& r, int serial) {
  char cpus[32];
  std::snprintf(cpus, sizeof cpus, "%g", r.cpus_per_learner);
  std::string stamp = serial > 1 ? r.started_at + "." + std::to_string(serial) : r.started_at;
  return (r.learner == "torch" ? "torch-" : "") + r.arm + "_n" + std::to_string(r.n) + "_s" + std::to_string(r.steps) + "_c" + cpus + "_" + stamp + "_r" +
         std::to_string(r.rep) + ".json";
}

Status WriteResultFile(const std::string& path, const RunResult& r) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << FormatRunResult(r);
    out.flush();
    if (!out) return ErrnoStatus("cannot write " + tmp, errno);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("cannot rename " + tmp, errno);
  return Status::Ok();
}

}  // namespace smolvm::bench
