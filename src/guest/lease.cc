// libsmolvm-guest: the clone's end of its lease link (smolvm/guest.h,
// smolvmLeasePayload and the rest; the frames are in guest/lease_wire.h).
//
// C-style like guest.cc: libc only. The connection is opened on first use
// and belongs to the process that opened it. Readers (LeasePayload,
// NextPayload) and writers (Reply, Complete) take different locks, so a
// thread may reply while another waits for the next payload.
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "guest/guest_io.h"
#include "guest/lease_wire.h"
#include "smolvm/guest.h"

#define SMOLVM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

pthread_mutex_t g_conn_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_read_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_write_mu = PTHREAD_MUTEX_INITIALIZER;
int g_fd = -1;
pid_t g_owner = 0;       // the process that opened g_fd
// Under g_read_mu:
char* g_first = nullptr;  // the lease payload (number 1), kept for smolvmLeasePayload
size_t g_first_len = 0;
uint64_t g_taken = 0;     // payloads read off the link
bool g_ended = false;     // END or the link closed: no payload any more
// Written under g_read_mu, read by writers: the payload the program works on.
uint64_t g_cursor = 0;
// Under g_write_mu:
bool g_completed = false;

void PutLe(unsigned char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = (unsigned char)(v >> (8 * i));
}

uint64_t GetLe(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

// The link's descriptor, connected on first use: >= 0, or -ENOTSUP when this
// process is no clone with a lease link, -EPERM in another process than the
// one that opened it.
int LinkFd() {
  pthread_mutex_lock(&g_conn_mu);
  int r;
  if (g_fd >= 0) {
    r = g_owner == getpid() ? g_fd : -EPERM;
  } else {
    const char* path = getenv("SMOLVM_LEASE_SOCKET");
    if (path == nullptr || path[0] == '\0') path = SMOLVM_LEASE_GUEST_PATH;
    r = smolvm_guest::Connect(path);
    if (r == -ENOENT || r == -ECONNREFUSED || r == -ENOTSOCK) r = -ENOTSUP;
    if (r >= 0) {
      g_fd = r;
      g_owner = getpid();
    }
  }
  pthread_mutex_unlock(&g_conn_mu);
  return r;
}

// Reads exactly n bytes: 0, 1 at EOF before any byte, or a negative errno.
int ReadFull(int fd, void* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = recv(fd, (char*)buf + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (r == 0) return got == 0 ? 1 : -EPROTO;
    got += (size_t)r;
  }
  return 0;
}

int WriteFull(int fd, const void* buf, size_t n) {
  size_t put = 0;
  while (put < n) {
    ssize_t w = send(fd, (const char*)buf + put, n - put, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    put += (size_t)w;
  }
  return 0;
}

// Reads the next payload off the link (under g_read_mu): 0 with *out (malloc,
// NUL-terminated), SMOLVM_LEASE_ENDED, or a negative errno.
int ReadPayload(char** out, size_t* out_len) {
  if (g_ended) return SMOLVM_LEASE_ENDED;
  int fd = LinkFd();
  if (fd < 0) return fd;
  unsigned char h[SMOLVM_LEASE_HEADER];
  int r = ReadFull(fd, h, sizeof h);
  if (r == 1) {  // the supervisor closed the link: the lease is over
    g_ended = true;
    return SMOLVM_LEASE_ENDED;
  }
  if (r < 0) return r;
  uint32_t len = (uint32_t)GetLe(h + 4, 4);
  uint64_t number = GetLe(h + 16, 8);
  if (h[1] != 0 || h[2] != 0 || h[3] != 0 || len > SMOLVM_LEASE_MAX_JSON) return -EPROTO;
  if (h[0] == SMOLVM_LEASE_END) {
    if (len != 0) return -EPROTO;
    g_ended = true;
    return SMOLVM_LEASE_ENDED;
  }
  if (h[0] != SMOLVM_LEASE_PAYLOAD || number != g_taken + 1 || len == 0) return -EPROTO;
  char* body = (char*)malloc((size_t)len + 1);
  if (body == nullptr) return -ENOMEM;
  r = ReadFull(fd, body, len);
  if (r != 0) {
    free(body);
    return r < 0 ? r : -EPROTO;
  }
  body[len] = '\0';
  ++g_taken;
  *out = body;
  *out_len = len;
  return 0;
}

int CopyOut(const char* src, size_t len, char** json, size_t* json_len) {
  char* c = (char*)malloc(len + 1);
  if (c == nullptr) return -ENOMEM;
  memcpy(c, src, len + 1);
  *json = c;
  *json_len = len;
  return 0;
}

// Under g_read_mu: the lease payload read and kept.
int TakeFirst() {
  if (g_first != nullptr) return 0;
  if (g_taken > 0) return -EPROTO;  // cannot happen: the first read is always kept
  return ReadPayload(&g_first, &g_first_len);
}

void SetCursor(uint64_t v) { __atomic_store_n(&g_cursor, v, __ATOMIC_RELEASE); }

int Send(uint8_t kind, const char* json, size_t len) {
  if (json == nullptr || len == 0 || len > SMOLVM_LEASE_MAX_JSON) return -EINVAL;
  pthread_mutex_lock(&g_write_mu);
  int r = g_completed ? -EPIPE : LinkFd();
  if (r >= 0) {
    int fd = r;
    unsigned char h[SMOLVM_LEASE_HEADER];
    memset(h, 0, sizeof h);
    h[0] = kind;
    PutLe(h + 4, len, 4);
    PutLe(h + 16, __atomic_load_n(&g_cursor, __ATOMIC_ACQUIRE), 8);
    r = WriteFull(fd, h, sizeof h);
    if (r == 0) r = WriteFull(fd, json, len);
    if (r == 0 && kind == SMOLVM_LEASE_COMPLETE) g_completed = true;
  }
  pthread_mutex_unlock(&g_write_mu);
  return r;
}

}  // namespace

SMOLVM_EXPORT int smolvmLeasePayload(char** json, size_t* len) {
  if (json == nullptr || len == nullptr) return -EINVAL;
  *json = nullptr;
  *len = 0;
  pthread_mutex_lock(&g_read_mu);
  int r = TakeFirst();
  if (r == 0) {
    r = CopyOut(g_first, g_first_len, json, len);
    if (r == 0 && g_cursor == 0) SetCursor(1);
  }
  pthread_mutex_unlock(&g_read_mu);
  return r;
}

SMOLVM_EXPORT int smolvmNextPayload(char** json, size_t* len) {
  if (json == nullptr || len == nullptr) return -EINVAL;
  *json = nullptr;
  *len = 0;
  pthread_mutex_lock(&g_read_mu);
  int r;
  if (g_cursor == 0) {
    r = TakeFirst();
    if (r == 0) r = CopyOut(g_first, g_first_len, json, len);
    if (r == 0) SetCursor(1);
  } else {
    r = ReadPayload(json, len);
    if (r == 0) SetCursor(g_taken);
  }
  pthread_mutex_unlock(&g_read_mu);
  return r;
}

SMOLVM_EXPORT int smolvmReply(const char* json, size_t len) { return Send(SMOLVM_LEASE_REPLY, json, len); }

SMOLVM_EXPORT int smolvmComplete(const char* json, size_t len) { return Send(SMOLVM_LEASE_COMPLETE, json, len); }

SMOLVM_EXPORT void smolvmLeaseFree(char* json) { free(json); }
