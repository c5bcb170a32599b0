#include "bench/learner_events.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace smolvm::bench {

using json = nlohmann::json;

LearnerProgress ParseLearnerEvents(const std::string& text) {
  LearnerProgress p;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;  // incomplete last line
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    // Reuse the result reader's tolerance (NaN tokens, null, string numbers)
    // by parsing the event as a one-learner result.
    json e = json::parse(QuoteNonFiniteTokens(line), nullptr, false);
    if (e.is_discarded() || !e.is_object()) continue;
    std::string ev = e.value("event", "");
    auto wrapped = ParseRunResult(json({{"arm", "-"}, {"learners", json::array({e})}}).dump());
    if (!wrapped.ok() || wrapped->learners.empty()) continue;
    const LearnerResult& l = wrapped->learners[0];
    double t = e.contains("t") && e["t"].is_number() ? e["t"].get<double>() : 0;
    if (ev == "ready") {
      p.ready = true;
      p.ready_t = t;
      p.load_ms = e.contains("load_ms") && e["load_ms"].is_number() ? e["load_ms"].get<double>() : NAN;
      p.result.lid = l.lid;
    } else if (ev == "step") {
      ++p.steps;
    } else if (ev == "done") {
      p.done = true;
      p.result = l;
      p.result.load_s = p.ready ? p.load_ms / 1e3 : NAN;
      p.result.t_done = t > 0 ? t : NAN;
    }
  }
  return p;
}

std::map<std::string, LearnerProgress> ReadCoordDir(const std::string& coord) {
  namespace fs = std::filesystem;
  std::map<std::string, LearnerProgress> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(coord, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("learner_", 0) != 0 || e.path().extension() != ".jsonl") continue;
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    LearnerProgress p = ParseLearnerEvents(ss.str());
    std::string lid = name.substr(8, name.size() - 8 - 6);
    if (p.result.lid.empty()) p.result.lid = lid;
    out[lid] = std::move(p);
  }
  return out;
}

}  // namespace smolvm::bench
