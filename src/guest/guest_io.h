// Line I/O of libsmolvm-guest over the forkpoint socket (guest/forkpoint_wire.h).
// Plain C-style helpers for the guest library only: libc, no smolvm library.
// Every function returns 0 (or a descriptor) or a negative errno.
#pragma once

#include <stddef.h>

namespace smolvm_guest {

// Connects a SOCK_STREAM unix socket (close-on-exec) to `path`.
int Connect(const char* path);
// Sends one printf-formatted line plus '\n' (at most SMOLVM_FP_MAX_LINE bytes).
int SendLine(int fd, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// Reads one line (without '\n') byte by byte so nothing past it is consumed;
// a descriptor riding with the line lands in *fd_out (else -1 there).
int ReadLine(int fd, char* buf, size_t cap, int* fd_out);
// "ERR <errno> <text>" -> -errno (-EIO when unparsable).
int ErrFromLine(const char* line);
// Reads one line and expects exactly `want`; an ERR line gives its errno.
int Expect(int fd, const char* want, int* fd_out);

}  // namespace smolvm_guest
