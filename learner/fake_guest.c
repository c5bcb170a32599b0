/* A stand-in for libsmolvm-guest.so in the learner's --fork tests.
 * FAKE_GUEST_FORK=<n>: smolvmForkpoint returns n (a clone index, or a
 * negative golden-release code); unset: -ENOTSUP (no controller).
 * smolvmMarkFrozen counts calls into FAKE_GUEST_LOG (one line per call). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int smolvmForkpoint(void) {
  const char* v = getenv("FAKE_GUEST_FORK");
  return v ? atoi(v) : -ENOTSUP;
}

int smolvmMarkFrozen(const void* ptr, size_t bytes) {
  const char* log = getenv("FAKE_GUEST_LOG");
  if (log) {
    FILE* f = fopen(log, "a");
    if (f) {
      fprintf(f, "%p %zu\n", ptr, bytes);
      fclose(f);
    }
  }
  return 0;
}
