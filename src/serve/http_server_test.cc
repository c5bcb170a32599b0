#include "serve/http_server.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "serve/test_http_client.h"

namespace smolvm::serve {
namespace {

using testing::ConnectTcp;
using testing::ConnectUnix;
using testing::Exchange;

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/serve-http-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    sock_ = dir_ + "/serve.sock";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_, sock_;
};

HttpResponse Echo(HttpRequest& r) {
  nlohmann::json j;
  j["method"] = r.method;
  j["path"] = r.path;
  j["query"] = r.query;
  j["body"] = r.body;
  j["uid"] = r.peer.unix_socket ? static_cast<int64_t>(r.peer.uid) : -1;
  j["token"] = r.peer.bearer_token;
  j["key"] = r.idempotency_key;
  return JsonResponse(200, j);
}

TEST_F(HttpServerTest, UnixSocketPassesPeerUidPathQueryAndBody) {
  ListenOptions o;
  o.unix_path = sock_;
  auto s = HttpServer::Start(o, Echo);
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto r = Exchange(ConnectUnix(sock_), "POST", "/v1/pools/a%20b?limit=5&after=x%2By", "{\"x\":1}",
                    {{"Idempotency-Key", "k1"}});
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["path"], "/v1/pools/a b");
  EXPECT_EQ(j["query"]["limit"], "5");
  EXPECT_EQ(j["query"]["after"], "x+y");
  EXPECT_EQ(j["body"], "{\"x\":1}");
  EXPECT_EQ(j["uid"], static_cast<int64_t>(::getuid()));
  EXPECT_EQ(j["key"], "k1");
  // An encoded '/' stays inside its segment: a name, never another route.
  r = Exchange(ConnectUnix(sock_), "DELETE", "/v1/pools/p%2Facquires%2fk?x=a%2Fb", "");
  j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["path"], "/v1/pools/p%2Facquires%2fk");
  EXPECT_EQ(j["query"]["x"], "a/b");
}

TEST_F(HttpServerTest, TcpOnLoopbackCarriesTheBearerTokenAndNoUid) {
  ListenOptions o;
  o.tcp_host = "127.0.0.1";
  auto s = HttpServer::Start(o, Echo);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_GT((*s)->tcp_port(), 0);
  auto r = Exchange(ConnectTcp((*s)->tcp_port()), "GET", "/v1/health", "", {{"Authorization", "Bearer tok"}});
  ASSERT_EQ(r.status, 200);
  auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["uid"], -1);
  EXPECT_EQ(j["token"], "tok");
}

TEST_F(HttpServerTest, BeyondLoopbackWithoutTlsIsRefused) {
  ListenOptions o;
  o.tcp_host = "0.0.0.0";
  auto s = HttpServer::Start(o, Echo);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--tls-cert"), std::string::npos) << s.status().message();
  o.tls_cert_file = dir_ + "/missing.pem";
  o.tls_key_file = dir_ + "/missing.key";
  s = HttpServer::Start(o, Echo);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--tls-cert"), std::string::npos) << s.status().message();
}

TEST_F(HttpServerTest, OversizedBodyIs413) {
  ListenOptions o;
  o.unix_path = sock_;
  o.max_body_bytes = 1000;
  auto s = HttpServer::Start(o, Echo);
  ASSERT_TRUE(s.ok());
  auto r = Exchange(ConnectUnix(sock_), "POST", "/v1/x", std::string(5000, 'a'));
  EXPECT_EQ(r.status, 413);
  EXPECT_NE(r.body.find("too_large"), std::string::npos);
}

TEST_F(HttpServerTest, MalformedRequestIs400AndTheServerLivesOn) {
  ListenOptions o;
  o.unix_path = sock_;
  auto s = HttpServer::Start(o, Echo);
  ASSERT_TRUE(s.ok());
  int fd = ConnectUnix(sock_);
  const char junk[] = "NOT HTTP AT ALL\r\n\r\n";
  ASSERT_EQ(::send(fd, junk, sizeof junk - 1, 0), static_cast<ssize_t>(sizeof junk - 1));
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_NE(got.find("400"), std::string::npos) << got;
  EXPECT_EQ(Exchange(ConnectUnix(sock_), "GET", "/v1/health", "").status, 200);
}

// A handler that waits (a long poll) holds only its own connection: others
// are answered meanwhile, and Stop ends the wait through req.gone().
TEST_F(HttpServerTest, LongPollsDoNotStarveOtherRequests) {
  ListenOptions o;
  o.unix_path = sock_;
  std::atomic<int> waiting{0};
  auto s = HttpServer::Start(o, [&](HttpRequest& r) {
    if (r.path == "/wait") {
      waiting++;
      while (!r.gone()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return JsonResponse(200, {{"ended", true}});
    }
    return JsonResponse(200, {{"ok", true}});
  });
  ASSERT_TRUE(s.ok());
  std::vector<std::thread> polls;
  for (int i = 0; i < 32; ++i)
    polls.emplace_back([&] { Exchange(ConnectUnix(sock_), "GET", "/wait", ""); });
  while (waiting.load() < 32) std::this_thread::yield();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Exchange(ConnectUnix(sock_), "GET", "/quick", "").status, 200);
  (*s)->Stop();
  for (auto& t : polls) t.join();
  EXPECT_FALSE(std::filesystem::exists(sock_));
}

TEST_F(HttpServerTest, SecondServerOnALiveSocketIsRefusedAndAStaleOneIsReplaced) {
  ListenOptions o;
  o.unix_path = sock_;
  auto a = HttpServer::Start(o, Echo);
  ASSERT_TRUE(a.ok());
  auto b = HttpServer::Start(o, Echo);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("another serve"), std::string::npos);
  // A socket file nobody answers on (a killed serve's) is taken over.
  a->reset();
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock_.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ::close(fd);
  auto c = HttpServer::Start(o, Echo);
  ASSERT_TRUE(c.ok()) << c.status().message();
}

}  // namespace
}  // namespace smolvm::serve
