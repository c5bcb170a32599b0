/* A leased clone's program for the lease tests, driven by its payloads.
 *   lease_clone [golden OUT_DIR]
 * With "golden": waits at smolvmForkpoint() first; a clone then touches
 * OUT_DIR/ran-<index> (its user code runs) before taking its payloads.
 * Without: takes its payloads at once ($SMOLVM_LEASE_SOCKET, unit tests).
 * Each payload is {"op": ...}:
 *   echo      reply {"k":K,"got":<the payload>} (K: the payload's number)
 *   twice     two replies {"k":K,"part":1}, {"k":K,"part":2}
 *   many      reply {"k":K,"i":i} for i = 0..99
 *   complete  complete {"done":K}, then exit 0
 *   exit      exit 3 without completing
 *   malformed reply "{not json" (the supervisor refuses it)
 *   hostile   write a frame header claiming 2 MiB to every socket descriptor
 *   big       reply 1 MiB + 1 bytes of JSON (the library refuses it: reply {"big":-errno})
 * When the lease ends (no more payloads): complete {"ended":true,"k":K}. */
#include <smolvm/guest.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static void Reply(const char* s) {
  int r = smolvmReply(s, strlen(s));
  if (r != 0) fprintf(stderr, "lease_clone: reply failed %d\n", r);
}

static void Hostile(void) {
  unsigned char h[24] = {5, 0, 0, 0, 0, 0, 0x20, 0}; /* COMPLETE, length 2 MiB */
  for (int fd = 3; fd < 256; ++fd) {
    int type;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0) (void)!write(fd, h, sizeof h);
  }
}

int main(int argc, char** argv) {
  int idx = 0;
  if (argc > 2 && strcmp(argv[1], "golden") == 0) {
    printf("golden ready\n");
    fflush(stdout);
    idx = smolvmForkpoint();
    if (idx < 0) return 0;
    char path[512];
    snprintf(path, sizeof path, "%s/ran-%d", argv[2], idx);
    FILE* f = fopen(path, "w");
    if (f != NULL) fclose(f);
    printf("clone %d runs\n", idx);
    fflush(stdout);
  }
  char* p = NULL;
  size_t n = 0;
  int k = 0;
  char buf[4096];
  for (int r = smolvmLeasePayload(&p, &n); r == 0; r = smolvmNextPayload(&p, &n)) {
    ++k;
    if (strstr(p, "\"echo\"") != NULL && n < 2048) {
      snprintf(buf, sizeof buf, "{\"k\":%d,\"got\":%s}", k, p);
      Reply(buf);
    } else if (strstr(p, "\"twice\"") != NULL) {
      snprintf(buf, sizeof buf, "{\"k\":%d,\"part\":1}", k);
      Reply(buf);
      snprintf(buf, sizeof buf, "{\"k\":%d,\"part\":2}", k);
      Reply(buf);
    } else if (strstr(p, "\"many\"") != NULL) {
      for (int i = 0; i < 100; ++i) {
        snprintf(buf, sizeof buf, "{\"k\":%d,\"i\":%d}", k, i);
        Reply(buf);
      }
    } else if (strstr(p, "\"complete\"") != NULL) {
      snprintf(buf, sizeof buf, "{\"done\":%d}", k);
      smolvmComplete(buf, strlen(buf));
      return 0;
    } else if (strstr(p, "\"exit\"") != NULL) {
      return 3;
    } else if (strstr(p, "\"malformed\"") != NULL) {
      Reply("{not json");
    } else if (strstr(p, "\"hostile\"") != NULL) {
      Hostile();
    } else if (strstr(p, "\"big\"") != NULL) {
      size_t len = (1u << 20) + 1;
      char* big = malloc(len);
      memset(big, ' ', len);
      big[0] = '1';
      int e = smolvmReply(big, len);
      free(big);
      snprintf(buf, sizeof buf, "{\"big\":%d}", e);
      Reply(buf);
    }
    smolvmLeaseFree(p);
  }
  snprintf(buf, sizeof buf, "{\"ended\":true,\"k\":%d}", k);
  smolvmComplete(buf, strlen(buf));
  return 0;
}
