// Metrics in Prometheus' text format: exact values at any size, escaped
// labels, a TYPE for every series; and the service's counters after a
// lease's life.
#include "serve/metrics.h"

#include <regex>
#include <set>
#include <sstream>

#include "serve/service_test_fixture.h"

namespace smolvm::serve {
namespace {

using namespace testing;
using nlohmann::json;

// Each sample line "name{labels} value" has its name's # TYPE line before it.
void ExpectWellFormed(const std::string& text) {
  static const std::regex kSample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\.)*",?)*\})? (-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?)$)");
  std::set<std::string> typed;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream w(line.substr(7));
      std::string name, type;
      w >> name >> type;
      EXPECT_TRUE(type == "counter" || type == "gauge") << line;
      EXPECT_TRUE(typed.insert(name).second) << "two TYPE lines for " << name;
      continue;
    }
    if (line.rfind("# HELP ", 0) == 0) continue;
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, kSample)) << "not a sample: " << line;
    EXPECT_TRUE(typed.count(m[1].str())) << "no TYPE before " << line;
  }
}

TEST(Metrics, CountersKeepEveryDigitAndLabelsAreEscaped) {
  Metrics m;
  for (int i = 0; i < 3; ++i) m.Add("smolvm_serve_x_total", {}, 1234567);
  m.Add("smolvm_serve_x_total");
  m.Add("smolvm_serve_ms_total", {}, 0.25);
  m.Add("smolvm_serve_y_total", {{"pool", "a\"b\\c\nd"}});
  std::string text = m.Render();
  EXPECT_NE(text.find("\nsmolvm_serve_x_total 3703702\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nsmolvm_serve_ms_total 0.25\n"), std::string::npos) << text;
  EXPECT_NE(text.find("smolvm_serve_y_total{pool=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << text;
  EXPECT_EQ(m.Value("smolvm_serve_x_total"), 3703702);
  ExpectWellFormed(text);
}

TEST_F(ServiceTest, MetricsCountALeasesLife) {
  ASSERT_EQ(MakePool("p", 2).status, 201);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", {{"payload", {{"x", 1}}}});
  ASSERT_EQ(a.status, 201);
  std::string id = a.body["id"];
  ASSERT_EQ(Call(kAlice, "GET", "/v1/leases/" + id + "/results?wait_s=5").body["state"], "ended");
  ASSERT_EQ(Call(kAlice, "POST", "/v1/leases/" + id + "/heartbeat").status, 200);
  ASSERT_EQ(Call(kAlice, "DELETE", "/v1/leases/" + id).status, 200);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/pools/p/leases", {{"count", 5}}).status, 503);
  svc_->RefillNow();  // the refill the lease woke (one clone forked behind it) is done
  Reply m = Call(kOperator, "GET", "/v1/metrics");
  ASSERT_EQ(m.status, 200);
  const std::string& t = m.text;
  for (const char* want : {
           "smolvm_serve_pools_created_total 1\n",
           "smolvm_serve_clones_forked_total 3\n",
           "smolvm_serve_acquires_total{result=\"ok\"} 1\n",
           "smolvm_serve_acquires_total{result=\"timeout\"} 1\n",
           "smolvm_serve_clones_leased_total 1\n",
           "smolvm_serve_leases_ended_total{result=\"completed\"} 1\n",
           "smolvm_serve_heartbeats_total 1\n",
           "smolvm_serve_releases_total 1\n",
           "smolvm_serve_http_requests_total{operation=\"acquireLease\",status=\"503\"} 1\n",
           "smolvm_serve_leases_active 0\n",
           "smolvm_serve_clones{pool=\"alice:p\",state=\"leased\"} 0\n",
       })
    EXPECT_NE(t.find(want), std::string::npos) << "no " << want << " in\n" << t;
  ExpectWellFormed(t);
}

}  // namespace
}  // namespace smolvm::serve
