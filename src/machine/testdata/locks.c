/* Run inside a machine as its root: tries to undo each read-only mount named
 * on the command line and prints one line per path, e.g.
 *   /usr remount=EPERM setattr=EPERM clone_setattr=EPERM umount=EINVAL detach=EINVAL write=EROFS
 * "OK" where the kernel allowed it. `--over PATH` mounts a tmpfs over PATH and
 * writes a file there (allowed; it must not reach the host). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char* Res(long r) {
  if (r >= 0) return "OK";
  switch (errno) {
    case EPERM: return "EPERM";
    case EINVAL: return "EINVAL";
    case EROFS: return "EROFS";
    case EBUSY: return "EBUSY";
    case EACCES: return "EACCES";
    default: return strerror(errno);
  }
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--over") == 0 && i + 1 < argc) {
      const char* p = argv[++i];
      long r = mount("tmpfs", p, "tmpfs", 0, "size=64k");
      char f[512];
      snprintf(f, sizeof f, "%s/over-probe", p);
      int fd = r == 0 ? open(f, O_CREAT | O_WRONLY, 0644) : -1;
      printf("%s over=%s write=%s\n", p, Res(r), fd >= 0 ? "OK" : "FAILED");
      if (fd >= 0) close(fd);
      continue;
    }
    const char* p = argv[i];
    struct mount_attr clr = {0};
    clr.attr_clr = MOUNT_ATTR_RDONLY;
    const char* remount = Res(mount(NULL, p, NULL, MS_REMOUNT | MS_BIND, NULL));
    const char* setattr = Res(syscall(SYS_mount_setattr, AT_FDCWD, p, 0, &clr, sizeof clr));
    long tree = syscall(SYS_open_tree, AT_FDCWD, p, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    const char* clone_setattr =
        tree < 0 ? "NOCLONE" : Res(syscall(SYS_mount_setattr, (int)tree, "", AT_EMPTY_PATH, &clr, sizeof clr));
    const char* umount = Res(umount2(p, 0));
    const char* detach = Res(umount2(p, MNT_DETACH));
    char f[512];
    snprintf(f, sizeof f, "%s/lock-probe", p);
    int fd = open(f, O_CREAT | O_WRONLY, 0644);
    const char* write = fd >= 0 ? "OK" : Res(-1);
    if (fd >= 0) {
      close(fd);
      unlink(f);
    }
    printf("%s remount=%s setattr=%s clone_setattr=%s umount=%s detach=%s write=%s\n", p, remount, setattr,
           clone_setattr, umount, detach, write);
  }
  return 0;
}
