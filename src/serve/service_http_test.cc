// The service behind the real HTTP server: TCP needs a token (401 without),
// a token reaches only its tenant's resources, and the Unix socket's peer
// uid is the caller.
#include <unistd.h>

#include "serve/http_server.h"
#include "serve/service_test_fixture.h"
#include "serve/test_http_client.h"

namespace smolvm::serve {
namespace {

using namespace testing;
using nlohmann::json;

class ServiceHttpTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    ListenOptions o;
    o.unix_path = dir_ + "/serve.sock";
    o.tcp_host = "127.0.0.1";
    Service* s = svc_.get();
    auto server = HttpServer::Start(o, [s](HttpRequest& r) { return s->Handle(r); });
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(*server);
  }
  void TearDown() override {
    server_.reset();
    ServiceTest::TearDown();
  }
  TestResponse Tcp(const std::string& method, const std::string& target, const std::string& token,
                   const std::string& body = "") {
    std::map<std::string, std::string> h;
    if (!token.empty()) h["Authorization"] = "Bearer " + token;
    return Exchange(ConnectTcp(server_->tcp_port()), method, target, body, h);
  }
  std::unique_ptr<HttpServer> server_;
};

TEST_F(ServiceHttpTest, TcpWithoutATokenIs401AndWithAWrongOneToo) {
  TestResponse r = Tcp("GET", "/v1/pools", "");
  EXPECT_EQ(r.status, 401) << r.body;
  EXPECT_NE(r.body.find("unauthenticated"), std::string::npos);
  EXPECT_EQ(Tcp("GET", "/v1/pools", "smolvm_0000").status, 401);
  EXPECT_EQ(Tcp("GET", "/v1/health", "").status, 200);  // public
  // The operator is uid 0 on the socket only: no token makes one over TCP.
  EXPECT_EQ(Tcp("GET", "/v1/metrics", "").status, 401);
}

TEST_F(ServiceHttpTest, ATokenReachesOnlyItsTenantsResources) {
  ASSERT_EQ(MakePool("a", 1, "fake:hang").status, 201);
  Reply lease = Call(kAlice, "POST", "/v1/pools/a/leases", json::object());
  ASSERT_EQ(lease.status, 201);
  std::string alice = Call(kOperator, "POST", "/v1/tenants/alice/tokens").body["token"];
  std::string bob = Call(kOperator, "POST", "/v1/tenants/bob/tokens").body["token"];
  std::string id = lease.body["id"];
  EXPECT_EQ(Tcp("GET", "/v1/leases/" + id, alice).status, 200);
  EXPECT_EQ(Tcp("GET", "/v1/leases/" + id, bob).status, 404);
  EXPECT_EQ(Tcp("DELETE", "/v1/leases/" + id, bob).status, 404);
  EXPECT_EQ(Tcp("GET", "/v1/pools/a", bob).status, 404);
  EXPECT_EQ(Tcp("GET", "/v1/tenants", alice).status, 403);  // operator routes stay the operator's
  TestResponse mine = Tcp("GET", "/v1/pools", alice);
  EXPECT_EQ(json::parse(mine.body)["items"].size(), 1u);
}

TEST_F(ServiceHttpTest, TheSocketsPeerUidIsTheCaller) {
  TestResponse r = Exchange(ConnectUnix(dir_ + "/serve.sock"), "GET", "/v1/health", "");
  ASSERT_EQ(r.status, 200);
  json j = json::parse(r.body);
  EXPECT_EQ(j["operator"], ::getuid() == 0);
}

}  // namespace
}  // namespace smolvm::serve
