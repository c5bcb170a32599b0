// HttpServer: HTTP/1.1 on serve's listeners (Boost.Beast's parser and
// serializer over our own sockets).
//
// Why Beast and not Debian's cpp-httplib 0.11.4: that one ships as a shared
// library only (libcpp-httplib.so.0.11, absent from the GPU machine's image,
// where the smolvm binary must run as built), its handlers cannot see the
// socket (no SO_PEERCRED for uid -> tenant) and its fixed thread pool lets
// long polls starve other requests. Here every connection has its own
// thread (up to max_connections; beyond that a connection is answered 503
// and closed), so a long poll holds only its own.
//
// Listeners: a Unix socket (mode 0666; who may do what is decided per
// request from the peer's uid), and a TCP socket only when asked: loopback
// by default; a non-loopback address needs a TLS certificate and key
// (served with OpenSSL), else Start refuses.
//
// Thread safety: Start, Stop and the destructor from one thread; the handler
// is called from many connection threads at once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/status.h"
#include "base/unique_fd.h"
#include "serve/http_types.h"

namespace smolvm::serve {

struct ListenOptions {
  std::string unix_path;      // "" = no Unix socket
  std::string tcp_host;       // "" = no TCP listener
  int tcp_port = 0;           // 0 = any free port (see HttpServer::tcp_port)
  std::string tls_cert_file;  // PEM; with tls_key_file: TCP speaks TLS
  std::string tls_key_file;
  int max_connections = 512;
  int idle_timeout_ms = 60000;       // a keep-alive connection idle this long is closed
  size_t max_body_bytes = 2u << 20;  // larger bodies are answered 413
};

class HttpServer {
 public:
  using RequestHandler = std::function<HttpResponse(HttpRequest&)>;

  static Result<std::unique_ptr<HttpServer>> Start(const ListenOptions& options, RequestHandler handler);
  ~HttpServer();  // Stop()

  // The bound TCP port (the one picked when options.tcp_port was 0); -1 without TCP.
  int tcp_port() const { return tcp_port_; }

  // Closes the listeners and every connection, waits for connection threads
  // (a handler still running is waited for: handlers poll req.gone()).
  void Stop();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

 private:
  struct Tls;
  HttpServer(const ListenOptions& o, RequestHandler h);
  void AcceptLoop();
  void Serve(UniqueFd fd, bool unix_socket);

  ListenOptions options_;
  RequestHandler handler_;
  UniqueFd unix_fd_, tcp_fd_, stop_fd_;
  int tcp_port_ = -1;
  std::unique_ptr<Tls> tls_;
  std::thread acceptor_;
  std::mutex mu_;
  std::condition_variable idle_;
  int connections_ = 0;
  std::atomic<bool> stopping_{false};
};

// True for 127.0.0.0/8, ::1 and "localhost".
bool IsLoopbackHost(const std::string& host);

}  // namespace smolvm::serve
