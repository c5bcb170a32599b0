/* A CPU-only golden for the machine tests: in-memory and on-disk state, then
 * smolvmForkpoint(); each clone reports what it inherited and waits. */
#include <smolvm/guest.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char** argv) {
  int counter = 42;
  char* heap = malloc(64);
  strcpy(heap, "golden-heap");
  FILE* f = fopen("/workspace/state.txt", "w");
  fprintf(f, "golden\n");
  fclose(f);
  f = fopen("/tmp/scratch.txt", "w");
  fprintf(f, "tmp-golden\n");
  fclose(f);
  printf("golden ready\n");
  fflush(stdout);
  int idx = smolvmForkpoint();
  if (idx < 0) {
    printf("golden released %d\n", idx);
    return 0;
  }
  counter += idx;
  char host[64] = {0};
  gethostname(host, sizeof host - 1);
  f = fopen("/workspace/state.txt", "a");
  fprintf(f, "clone %d\n", idx);
  fclose(f);
  printf("clone idx=%d counter=%d heap=%s host=%s env_index=%s env_name=%s\n", idx, counter, heap, host,
         getenv("SMOLVM_FORK_INDEX"), getenv("SMOLVM_FORK_NAME"));
  fflush(stdout);
  if (argc > 1 && strcmp(argv[1], "exit") == 0) return 0;
  for (;;) pause();
}
