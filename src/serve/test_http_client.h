// A test-only HTTP/1.1 client over a Unix or TCP socket: one request per
// connection (Connection: close), the whole response read. Header-only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <string>

namespace smolvm::serve::testing {

struct TestResponse {
  int status = -1;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
};

inline int ConnectUnix(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline int ConnectTcp(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline TestResponse Exchange(int fd, const std::string& method, const std::string& target, const std::string& body,
                             const std::map<std::string, std::string>& headers = {}) {
  TestResponse r;
  if (fd < 0) return r;
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: serve\r\nConnection: close\r\n";
  for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT")
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  size_t off = 0;
  while (off < req.size()) {
    ssize_t w = ::send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
  std::string all;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    all.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  size_t sp = all.find(' ');
  size_t end = all.find("\r\n\r\n");
  if (sp == std::string::npos || end == std::string::npos) return r;
  r.status = std::atoi(all.c_str() + sp + 1);
  size_t line = all.find("\r\n") + 2;
  while (line < end) {
    size_t e = all.find("\r\n", line);
    std::string h = all.substr(line, e - line);
    size_t c = h.find(':');
    if (c != std::string::npos) {
      std::string k = h.substr(0, c);
      for (auto& ch : k) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      size_t v = c + 1;
      while (v < h.size() && h[v] == ' ') ++v;
      r.headers[k] = h.substr(v);
    }
    line = e + 2;
  }
  r.body = all.substr(end + 4);
  return r;
}

}  // namespace smolvm::serve::testing
