// The fixture of serve's service tests: a Service over a FakeCloneDriver
// and a temporary store, called through Handle as the HTTP server would
// (the peer's uid stands for SO_PEERCRED). Included by test files only.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "serve/fake_clone_driver.h"
#include "serve/service.h"

namespace smolvm::serve::testing {

inline constexpr uid_t kOperator = 0;
inline constexpr uid_t kAlice = 1001;
inline constexpr uid_t kBob = 1002;

struct Reply {
  int status = 0;
  nlohmann::json body;
  std::string text;
  std::string code() const { return body.is_object() && body.contains("error") ? body["error"].value("code", "") : ""; }
  std::string message() const {
    return body.is_object() && body.contains("error") ? body["error"].value("message", "") : "";
  }
};

// The "id" of a created object's reply ("" when it has none).
inline std::string Id(const Reply& r) { return r.body.value("id", ""); }

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/serve-svc-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    driver_ = std::make_unique<FakeCloneDriver>();
    StartService();
    ASSERT_EQ(Call(kOperator, "POST", "/v1/tenants", {{"name", "alice"}, {"uid", kAlice}}).status, 201);
    ASSERT_EQ(Call(kOperator, "POST", "/v1/tenants", {{"name", "bob"}, {"uid", kBob}}).status, 201);
  }
  void TearDown() override {
    svc_.reset();
    std::filesystem::remove_all(dir_);
  }
  void StartService() {
    ServiceOptions o;
    o.store_path = dir_ + "/serve.db";
    o.version = "test";
    // Long periods: the tests drive refills and housekeeping themselves.
    o.refill_period = std::chrono::milliseconds(3600000);
    o.housekeeping_period = std::chrono::milliseconds(3600000);
    o.pools.refill.first_backoff = refill_backoff_;
    o.pools.refill.acquire_quiet = refill_quiet_;
    auto s = Service::Start(o, driver_.get());
    ASSERT_TRUE(s.ok()) << s.status().message();
    svc_ = std::move(*s);
  }
  // A restart as a SIGKILL leaves things: the service goes, the machines stay.
  void Restart() {
    svc_.reset();
    StartService();
  }

  Reply Call(uid_t uid, const std::string& method, const std::string& target, const nlohmann::json& body = nullptr,
             const std::string& idempotency_key = "") {
    HttpRequest r;
    r.method = method;
    size_t q = target.find('?');
    r.path = target.substr(0, q);
    if (q != std::string::npos) {
      std::string rest = target.substr(q + 1);
      while (!rest.empty()) {
        size_t amp = rest.find('&');
        std::string kv = rest.substr(0, amp);
        size_t eq = kv.find('=');
        r.query[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
        if (amp == std::string::npos) break;
        rest = rest.substr(amp + 1);
      }
    }
    if (!body.is_null()) r.body = body.dump();
    r.peer.unix_socket = true;
    r.peer.uid = uid;
    r.idempotency_key = idempotency_key;
    HttpResponse res = svc_->Handle(r);
    Reply out;
    out.status = res.status;
    out.text = res.body;
    out.body = nlohmann::json::parse(res.body, nullptr, false);
    return out;
  }

  // A pool of `behaviour` clones for alice, refilled to min_ready.
  Reply MakePool(const std::string& name, int min_ready, const std::string& behaviour = "fake:echo",
                 nlohmann::json extra = nlohmann::json::object(), uid_t uid = kAlice) {
    nlohmann::json body = {{"name", name}, {"golden", {{"cmd", {behaviour}}}}, {"min_ready", min_ready}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    Reply r = Call(uid, "POST", "/v1/pools", body);
    if (r.status == 201) svc_->RefillNow();
    return r;
  }

  // Waits (driving housekeeping) until pred holds or ~10 s passed.
  template <class Pred>
  bool Eventually(Pred pred) {
    for (int i = 0; i < 1000; ++i) {
      if (pred()) return true;
      svc_->HousekeepNow();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return pred();
  }

  std::string dir_;
  std::chrono::milliseconds refill_backoff_{0};  // after a failed refill; set before StartService
  // A refill's wait after an acquire delivered (serve: 100 ms); 0: tests
  // refill right after an acquire.
  std::chrono::milliseconds refill_quiet_{0};
  std::unique_ptr<FakeCloneDriver> driver_;
  std::unique_ptr<Service> svc_;
};

}  // namespace smolvm::serve::testing
