// Metrics: serve's counters and gauges in Prometheus' text format
// (GET /v1/metrics). Counters only go up; gauges are read at scrape time
// from the callbacks the owners register.
//
// Thread safety: all methods from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace smolvm::serve {

class Metrics {
 public:
  // name: smolvm_serve_<what>_total; labels: {"k","v"} pairs, rendered in order.
  void Add(const std::string& name, const std::vector<std::pair<std::string, std::string>>& labels = {},
           double by = 1);
  double Value(const std::string& name, const std::vector<std::pair<std::string, std::string>>& labels = {}) const;
  // A gauge whose samples (label set -> value) are produced at scrape time.
  using Samples = std::vector<std::pair<std::vector<std::pair<std::string, std::string>>, double>>;
  void Gauge(const std::string& name, const std::string& help, std::function<Samples()> read);
  void Help(const std::string& name, const std::string& help);
  std::string Render() const;

 private:
  static std::string Key(const std::string& name, const std::vector<std::pair<std::string, std::string>>& labels);
  mutable std::mutex mu_;
  std::map<std::string, std::map<std::string, double>> counters_;  // name -> rendered labels -> value
  std::map<std::string, std::string> help_;
  std::vector<std::pair<std::string, std::function<Samples()>>> gauges_;
};

}  // namespace smolvm::serve
