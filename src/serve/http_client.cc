#include "serve/http_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstring>

#include "base/unique_fd.h"

namespace smolvm::serve {

namespace http = boost::beast::http;

namespace {

// Beast's sync stream concepts over a socket, reads bounded by a deadline.
class FdStream {
 public:
  FdStream(int fd, std::chrono::steady_clock::time_point deadline) : fd_(fd), deadline_(deadline) {}
  template <class Buffers>
  size_t read_some(const Buffers& bufs, boost::system::error_code& ec) {
    for (auto it = boost::asio::buffer_sequence_begin(bufs); it != boost::asio::buffer_sequence_end(bufs); ++it) {
      boost::asio::mutable_buffer b = *it;
      if (b.size() == 0) continue;
      for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now()).count();
        if (left <= 0) {
          ec = boost::asio::error::timed_out;
          return 0;
        }
        struct pollfd p = {fd_, POLLIN, 0};
        int r = ::poll(&p, 1, static_cast<int>(std::min<long>(left, 1 << 30)));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue;
        ssize_t n = ::recv(fd_, b.data(), b.size(), 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          ec = n == 0 ? boost::system::error_code(boost::asio::error::eof)
                      : boost::system::error_code(errno, boost::system::system_category());
          return 0;
        }
        ec = {};
        return static_cast<size_t>(n);
      }
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
      const char* p = static_cast<const char*>(b.data());
      size_t n = b.size();
      while (n > 0) {
        ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          ec = boost::asio::error::broken_pipe;
          return total;
        }
        p += w;
        n -= static_cast<size_t>(w);
        total += static_cast<size_t>(w);
      }
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
  int fd_;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace

std::string ClientReply::message() const {
  if (json.is_object() && json.contains("error") && json["error"].is_object())
    return json["error"].value("message", body);
  return body;
}

std::string DefaultServeSocket(const std::string& home) {
  const char* s = ::getenv("SMOLVM_SERVE_SOCKET");
  if (s != nullptr && *s != '\0') return s;
  return home + "/serve.sock";
}

Result<ClientReply> ServeCall(const std::string& socket_path, const std::string& method, const std::string& target,
                              const std::string& body, std::chrono::milliseconds timeout) {
  struct sockaddr_un a = {};
  a.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof a.sun_path) return InvalidArgument("socket path too long: " + socket_path);
  std::memcpy(a.sun_path, socket_path.c_str(), socket_path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    return Unavailable("serve does not answer at " + socket_path + " (" + std::strerror(errno) +
                       "; start it with 'smolvm serve', or name its socket with $SMOLVM_SERVE_SOCKET)");
  FdStream stream(fd.get(), std::chrono::steady_clock::now() + timeout);
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, "serve");
  req.keep_alive(false);
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
  }
  req.prepare_payload();
  boost::system::error_code ec;
  http::write(stream, req, ec);
  if (ec) return Unavailable("sending to serve at " + socket_path + ": " + ec.message());
  boost::beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64u << 20);
  http::read(stream, buffer, parser, ec);
  if (ec) return Unavailable("reading serve's answer at " + socket_path + ": " + ec.message());
  ClientReply r;
  r.status = static_cast<int>(parser.get().result_int());
  r.body = parser.get().body();
  r.json = nlohmann::json::parse(r.body, nullptr, false);
  return r;
}

}  // namespace smolvm::serve
