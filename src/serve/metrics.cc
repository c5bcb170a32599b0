#include "serve/metrics.h"

#include <charconv>

namespace smolvm::serve {

namespace {

std::string Escape(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

std::string Labels(const std::vector<std::pair<std::string, std::string>>& labels) {
  if (labels.empty()) return "";
  std::string s = "{";
  for (size_t i = 0; i < labels.size(); ++i)
    s += (i ? "," : "") + labels[i].first + "=\"" + Escape(labels[i].second) + "\"";
  return s + "}";
}

// The shortest text that reads back as v: every digit of a count (the
// stream's default 6 significant digits wrote 3703702 as 3.7037e+06).
std::string Num(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace

std::string Metrics::Key(const std::string& name, const std::vector<std::pair<std::string, std::string>>& labels) {
  return Labels(labels);
}

void Metrics::Add(const std::string& name, const std::vector<std::pair<std::string, std::string>>& labels, double by) {
  std::lock_guard<std::mutex> l(mu_);
  counters_[name][Key(name, labels)] += by;
}

double Metrics::Value(const std::string& name, const std::vector<std::pair<std::string, std::string>>& labels) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = counters_.find(name);
  if (it == counters_.end()) return 0;
  auto v = it->second.find(Key(name, labels));
  return v == it->second.end() ? 0 : v->second;
}

void Metrics::Gauge(const std::string& name, const std::string& help, std::function<Samples()> read) {
  std::lock_guard<std::mutex> l(mu_);
  help_[name] = help;
  gauges_.emplace_back(name, std::move(read));
}

void Metrics::Help(const std::string& name, const std::string& help) {
  std::lock_guard<std::mutex> l(mu_);
  help_[name] = help;
}

std::string Metrics::Render() const {
  std::vector<std::pair<std::string, std::function<Samples()>>> gauges;
  std::string out;
  {
    std::lock_guard<std::mutex> l(mu_);
    gauges = gauges_;
    for (const auto& [name, series] : counters_) {
      if (auto h = help_.find(name); h != help_.end()) out += "# HELP " + name + " " + h->second + "\n";
      out += "# TYPE " + name + " counter\n";
      for (const auto& [labels, v] : series) out += name + labels + " " + Num(v) + "\n";
    }
  }
  for (const auto& [name, read] : gauges) {
    std::string help;
    {
      std::lock_guard<std::mutex> l(mu_);
      help = help_.count(name) ? help_.at(name) : "";
    }
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " gauge\n";
    for (const auto& [labels, v] : read()) out += name + Labels(labels) + " " + Num(v) + "\n";
  }
  return out;
}

}  // namespace smolvm::serve
