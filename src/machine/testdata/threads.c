/* Starts N threads (argv[1]) that all wait until every one is started, then
 * prints how many it made; exit 0 when all N were made. A torch golden has
 * hundreds of threads: the machine's pids limit must hold it (issue 29). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int fds[2];

static void* Wait(void* arg) {
  (void)arg;
  char c;
  (void)!read(fds[0], &c, 1); /* returns when the writer closes */
  return NULL;
}

int main(int argc, char** argv) {
  int want = argc > 1 ? atoi(argv[1]) : 300;
  if (pipe(fds) != 0) return 2;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 << 10);
  pthread_t* t = calloc((size_t)want, sizeof *t);
  int made = 0;
  while (made < want && pthread_create(&t[made], &attr, Wait, NULL) == 0) ++made;
  printf("made %d threads\n", made);
  fflush(stdout);
  close(fds[1]);
  for (int i = 0; i < made; ++i) pthread_join(t[i], NULL);
  return made == want ? 0 : 1;
}
