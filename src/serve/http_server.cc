#include "serve/http_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstring>

namespace smolvm::serve {

namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;

struct HttpServer::Tls {
  SSL_CTX* ctx = nullptr;
  ~Tls() {
    if (ctx != nullptr) SSL_CTX_free(ctx);
  }
};

namespace {

// One connection's bytes: a plain socket or TLS over it. Reads wait for
// data, the server's stop, or the idle deadline, whichever comes first.
class Link {
 public:
  Link(int fd, int stop_fd, SSL* ssl) : fd_(fd), stop_fd_(stop_fd), ssl_(ssl) {}
  ~Link() {
    if (ssl_ != nullptr) {
      SSL_shutdown(ssl_);
      SSL_free(ssl_);
    }
  }
  void set_deadline(Clock::time_point d) { deadline_ = d; }

  // >0 bytes, 0 on EOF, -1 on error, stop or timeout.
  ssize_t Read(void* buf, size_t n) {
    if (ssl_ != nullptr && SSL_pending(ssl_) > 0) return SslRead(buf, n);
    if (!WaitReadable()) return -1;
    if (ssl_ != nullptr) return SslRead(buf, n);
    for (;;) {
      ssize_t r = ::recv(fd_, buf, n, 0);
      if (r < 0 && errno == EINTR) continue;
      return r;
    }
  }
  bool WriteAll(const void* buf, size_t n) {
    const char* p = static_cast<const char*>(buf);
    while (n > 0) {
      ssize_t w;
      if (ssl_ != nullptr) {
        int r = SSL_write(ssl_, p, static_cast<int>(n));
        if (r <= 0) return false;
        w = r;
      } else {
        w = ::send(fd_, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }
  // The peer hung up (or the server stops): a long poll stops waiting.
  bool PeerGone() const {
    struct pollfd p[2] = {{fd_, POLLRDHUP, 0}, {stop_fd_, POLLIN, 0}};
    if (::poll(p, 2, 0) <= 0) return false;
    return (p[0].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0 || (p[1].revents & POLLIN) != 0;
  }

 private:
  bool WaitReadable() {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
      if (left <= 0) return false;
      struct pollfd p[2] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
      int r = ::poll(p, 2, static_cast<int>(std::min<long>(left, 1 << 30)));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      if (p[1].revents & POLLIN) return false;
      return true;
    }
  }
  ssize_t SslRead(void* buf, size_t n) {
    int r = SSL_read(ssl_, buf, static_cast<int>(n));
    if (r > 0) return r;
    return SSL_get_error(ssl_, r) == SSL_ERROR_ZERO_RETURN ? 0 : -1;
  }

  int fd_, stop_fd_;
  SSL* ssl_;
  Clock::time_point deadline_ = Clock::now();
};

// Beast's SyncReadStream / SyncWriteStream over a Link.
class BeastStream {
 public:
  explicit BeastStream(Link& l) : link_(l) {}
  template <class Buffers>
  size_t read_some(const Buffers& bufs, boost::system::error_code& ec) {
    for (auto it = boost::asio::buffer_sequence_begin(bufs); it != boost::asio::buffer_sequence_end(bufs); ++it) {
      boost::asio::mutable_buffer b = *it;
      if (b.size() == 0) continue;
      ssize_t r = link_.Read(b.data(), b.size());
      if (r > 0) {
        ec = {};
        return static_cast<size_t>(r);
      }
      ec = r == 0 ? boost::system::error_code(boost::asio::error::eof)
                  : boost::system::error_code(boost::asio::error::timed_out);
      return 0;
    }
    ec = {};
    return 0;
  }
  template <class Buffers>
  size_t read_some(const Buffers& bufs) {
    boost::system::error_code ec;
    size_t n = read_some(bufs, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }
  template <class Buffers>
  size_t write_some(const Buffers& bufs, boost::system::error_code& ec) {
    size_t total = 0;
    for (auto it = boost::asio::buffer_sequence_begin(bufs); it != boost::asio::buffer_sequence_end(bufs); ++it) {
      boost::asio::const_buffer b = *it;
      if (!link_.WriteAll(b.data(), b.size())) {
        ec = boost::asio::error::broken_pipe;
        return total;
      }
      total += b.size();
    }
    ec = {};
    return total;
  }
  template <class Buffers>
  size_t write_some(const Buffers& bufs) {
    boost::system::error_code ec;
    size_t n = write_some(bufs, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

 private:
  Link& link_;
};

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A path keeps "%2F" as it is: an encoded '/' is part of its segment (a
// name, which then matches nothing), never a separator that would reach
// another route ("p%2Fdrain" is no pool "p"'s drain).
std::string PercentDecode(std::string_view s, bool plus_is_space, bool keep_slash = false) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      int h = HexValue(s[i + 1]), l = HexValue(s[i + 2]);
      if (h >= 0 && l >= 0 && !(keep_slash && h * 16 + l == '/')) {
        out += static_cast<char>(h * 16 + l);
        i += 2;
        continue;
      }
    }
    out += plus_is_space && s[i] == '+' ? ' ' : s[i];
  }
  return out;
}

void ParseTarget(std::string_view target, HttpRequest& req) {
  size_t q = target.find('?');
  req.path = PercentDecode(target.substr(0, q), false, /*keep_slash=*/true);
  if (q == std::string_view::npos) return;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    size_t amp = rest.find('&');
    std::string_view kv = rest.substr(0, amp);
    size_t eq = kv.find('=');
    std::string k = PercentDecode(kv.substr(0, eq), true);
    std::string v = eq == std::string_view::npos ? "" : PercentDecode(kv.substr(eq + 1), true);
    if (!k.empty()) req.query[k] = v;
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
}

bool WriteResponse(BeastStream& stream, const HttpResponse& r, bool keep_alive, unsigned version) {
  http::response<http::string_body> res{static_cast<http::status>(r.status), version};
  res.set(http::field::server, "smolvm-serve");
  res.set(http::field::content_type, r.content_type);
  res.keep_alive(keep_alive);
  res.body() = r.body;
  res.prepare_payload();
  boost::system::error_code ec;
  http::write(stream, res, ec);
  return !ec;
}

Result<UniqueFd> ListenUnix(const std::string& path) {
  struct sockaddr_un a = {};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof(a.sun_path)) return InvalidArgument("socket path too long: " + path);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus("socket", errno);
  // A socket file left by a serve that was killed: remove it only when
  // nothing answers on it (a live serve keeps its socket).
  UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0)
    return Status(Code::kAlreadyExists, "another serve answers on " + path + " (stop it first)");
  ::unlink(path.c_str());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) return ErrnoStatus("bind " + path, errno);
  ::chmod(path.c_str(), 0666);  // every uid may connect; the peer's uid decides what it may do
  if (::listen(fd.get(), 256) < 0) return ErrnoStatus("listen " + path, errno);
  return fd;
}

Result<UniqueFd> ListenTcp(const std::string& host, int port, int* bound) {
  struct addrinfo hints = {}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  std::string p = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), p.c_str(), &hints, &res);
  if (rc != 0) return InvalidArgument("--listen " + host + ": " + gai_strerror(rc));
  UniqueFd fd(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int b = ::bind(fd.get(), res->ai_addr, res->ai_addrlen);
  int err = errno;
  ::freeaddrinfo(res);
  if (b < 0) return ErrnoStatus("bind " + host + ":" + p, err);
  if (::listen(fd.get(), 256) < 0) return ErrnoStatus("listen", errno);
  struct sockaddr_storage ss = {};
  socklen_t len = sizeof ss;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
  *bound = ss.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port)
                                   : ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return fd;
}

}  // namespace

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  struct in_addr a;
  if (::inet_pton(AF_INET, host.c_str(), &a) == 1) return (ntohl(a.s_addr) >> 24) == 127;
  return false;
}

HttpServer::HttpServer(const ListenOptions& o, RequestHandler h) : options_(o), handler_(std::move(h)) {}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const ListenOptions& o, RequestHandler handler) {
  std::unique_ptr<HttpServer> s(new HttpServer(o, std::move(handler)));
  bool tls = !o.tls_cert_file.empty() || !o.tls_key_file.empty();
  if (!o.tcp_host.empty()) {
    if (!IsLoopbackHost(o.tcp_host) && !tls)
      return InvalidArgument("--listen " + o.tcp_host +
                             " is beyond loopback: give --tls-cert and --tls-key (tokens never cross a network in clear)");
    if (tls && (o.tls_cert_file.empty() || o.tls_key_file.empty()))
      return InvalidArgument("TLS needs both --tls-cert and --tls-key");
    if (tls) {
      s->tls_ = std::make_unique<Tls>();
      s->tls_->ctx = SSL_CTX_new(TLS_server_method());
      if (s->tls_->ctx == nullptr) return Internal("SSL_CTX_new failed");
      SSL_CTX_set_min_proto_version(s->tls_->ctx, TLS1_2_VERSION);
      if (SSL_CTX_use_certificate_chain_file(s->tls_->ctx, o.tls_cert_file.c_str()) != 1)
        return InvalidArgument("--tls-cert " + o.tls_cert_file + ": not a readable PEM certificate");
      if (SSL_CTX_use_PrivateKey_file(s->tls_->ctx, o.tls_key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
          SSL_CTX_check_private_key(s->tls_->ctx) != 1)
        return InvalidArgument("--tls-key " + o.tls_key_file + ": not the certificate's private key in PEM");
    }
    ASSIGN_OR_RETURN(s->tcp_fd_, ListenTcp(o.tcp_host, o.tcp_port, &s->tcp_port_));
  }
  if (!o.unix_path.empty()) {
    ASSIGN_OR_RETURN(s->unix_fd_, ListenUnix(o.unix_path));
  }
  if (!s->unix_fd_.valid() && !s->tcp_fd_.valid()) return InvalidArgument("nothing to listen on");
  s->stop_fd_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s->stop_fd_.valid()) return ErrnoStatus("eventfd", errno);
  s->acceptor_ = std::thread([p = s.get()] { p->AcceptLoop(); });
  return s;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (stopping_.exchange(true)) {
    if (acceptor_.joinable()) acceptor_.join();
    return;
  }
  if (stop_fd_.valid()) {
    uint64_t one = 1;
    (void)!::write(stop_fd_.get(), &one, sizeof one);
  }
  if (acceptor_.joinable()) acceptor_.join();
  std::unique_lock<std::mutex> l(mu_);
  idle_.wait(l, [&] { return connections_ == 0; });
  if (!options_.unix_path.empty() && unix_fd_.valid()) ::unlink(options_.unix_path.c_str());
}

void HttpServer::AcceptLoop() {
  for (;;) {
    struct pollfd p[3] = {{stop_fd_.get(), POLLIN, 0}, {unix_fd_.get(), POLLIN, 0}, {tcp_fd_.get(), POLLIN, 0}};
    int r = ::poll(p, 3, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || (p[0].revents & POLLIN)) return;
    for (int i = 1; i < 3; ++i) {
      if (!(p[i].revents & POLLIN)) continue;
      UniqueFd c(::accept4(p[i].fd, nullptr, nullptr, SOCK_CLOEXEC));
      if (!c.valid()) continue;
      bool unix_socket = i == 1;
      if (!unix_socket) {
        int one = 1;
        ::setsockopt(c.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      }
      {
        std::lock_guard<std::mutex> l(mu_);
        if (connections_ >= options_.max_connections) {
          static const char kBusy[] =
              "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
              "Content-Length: 86\r\n\r\n{\"error\":{\"code\":\"unavailable\",\"message\":\"too many connections to serve; retry\"}}\n";
          if (unix_socket) (void)!::send(c.get(), kBusy, sizeof kBusy - 1, MSG_NOSIGNAL);
          continue;
        }
        connections_++;
      }
      std::thread([this, fd = c.Release(), unix_socket]() mutable {
        Serve(UniqueFd(fd), unix_socket);
        std::lock_guard<std::mutex> l(mu_);
        if (--connections_ == 0) idle_.notify_all();
      }).detach();
    }
  }
}

void HttpServer::Serve(UniqueFd fd, bool unix_socket) {
  Peer peer;
  peer.unix_socket = unix_socket;
  if (unix_socket) {
    struct ucred cred = {};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return;
    peer.uid = cred.uid;
  }
  SSL* ssl = nullptr;
  if (!unix_socket && tls_ != nullptr) {
    ssl = SSL_new(tls_->ctx);
    if (ssl == nullptr) return;
    SSL_set_fd(ssl, fd.get());
    struct timeval tv = {10, 0};  // the handshake is bounded; the fd stays blocking after
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (SSL_accept(ssl) != 1) {
      SSL_free(ssl);
      return;
    }
    struct timeval none = {0, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
  }
  Link link(fd.get(), stop_fd_.get(), ssl);
  BeastStream stream(link);
  boost::beast::flat_buffer buffer;
  for (;;) {
    link.set_deadline(Clock::now() + std::chrono::milliseconds(options_.idle_timeout_ms));
    http::request_parser<http::string_body> parser;
    parser.body_limit(options_.max_body_bytes);
    parser.header_limit(64 * 1024);
    boost::system::error_code ec;
    http::read(stream, buffer, parser, ec);
    if (ec == http::error::body_limit) {
      (void)WriteResponse(stream,
                          ErrorResponse(413, "too_large",
                                        "the request body is over " + std::to_string(options_.max_body_bytes) + " bytes"),
                          false, 11);
      return;
    }
    if (ec) {
      if (ec != boost::asio::error::eof && ec != http::error::end_of_stream && ec != boost::asio::error::timed_out &&
          buffer.size() > 0)
        (void)WriteResponse(stream, ErrorResponse(400, "invalid_argument", "malformed HTTP request: " + ec.message()),
                            false, 11);
      return;
    }
    auto& m = parser.get();
    HttpRequest req;
    req.method = std::string(m.method_string());
    ParseTarget(std::string_view(m.target().data(), m.target().size()), req);
    req.body = std::move(m.body());
    if (auto it = m.find(http::field::content_type); it != m.end()) req.content_type = std::string(it->value());
    if (auto it = m.find("Idempotency-Key"); it != m.end()) req.idempotency_key = std::string(it->value());
    req.peer = peer;
    if (auto it = m.find(http::field::authorization); it != m.end()) {
      std::string v(it->value());
      if (v.rfind("Bearer ", 0) == 0) req.peer.bearer_token = v.substr(7);
    }
    req.gone = [&link, this] { return stopping_.load() || link.PeerGone(); };
    bool keep = m.keep_alive() && !stopping_.load();
    HttpResponse res = handler_(req);
    if (!WriteResponse(stream, res, keep, m.version()) || !keep) return;
  }
}

}  // namespace smolvm::serve
