#include "serve/route_table.h"

namespace smolvm::serve {

std::vector<std::string> SplitPath(const std::string& path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '/') {
      ++i;
      continue;
    }
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    out.push_back(path.substr(i, j - i));
    i = j;
  }
  return out;
}

namespace {

bool IsCapture(const std::string& s) { return s.size() > 2 && s.front() == '{' && s.back() == '}'; }

bool MatchSegments(const std::vector<std::string>& tmpl, const std::vector<std::string>& got,
                   std::map<std::string, std::string>* params) {
  if (tmpl.size() != got.size()) return false;
  std::map<std::string, std::string> p;
  for (size_t i = 0; i < tmpl.size(); ++i) {
    if (IsCapture(tmpl[i])) {
      if (got[i].empty()) return false;
      p[tmpl[i].substr(1, tmpl[i].size() - 2)] = got[i];
    } else if (tmpl[i] != got[i]) {
      return false;
    }
  }
  if (params != nullptr) *params = std::move(p);
  return true;
}

}  // namespace

void RouteTable::Add(RouteInfo info, Handler handler) {
  Route r;
  r.segments = SplitPath(info.path);
  r.info = std::move(info);
  r.handler = std::move(handler);
  routes_.push_back(std::move(r));
}

const RouteTable::Route* RouteTable::Match(HttpRequest& req, int* status) const {
  std::vector<std::string> got = SplitPath(req.path);
  bool path_seen = false;
  // Literal segments win over captures: "/v1/leases/x" never shadows a
  // literal route of the same length, because each template is tried and the
  // first with the fewest captures is taken.
  const Route* best = nullptr;
  int best_captures = 1 << 30;
  std::map<std::string, std::string> best_params;
  for (const auto& r : routes_) {
    std::map<std::string, std::string> params;
    if (!MatchSegments(r.segments, got, &params)) continue;
    path_seen = true;
    if (r.info.method != req.method) continue;
    int captures = static_cast<int>(params.size());
    if (captures < best_captures) {
      best = &r;
      best_captures = captures;
      best_params = std::move(params);
    }
  }
  if (best != nullptr) {
    req.params = std::move(best_params);
    return best;
  }
  *status = path_seen ? 405 : 404;
  return nullptr;
}

}  // namespace smolvm::serve
