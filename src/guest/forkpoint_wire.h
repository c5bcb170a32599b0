// The forkpoint protocol: how libsmolvm-guest (inside a machine) and the
// machine's supervisor (host side) talk over SMOLVM_FORKPOINT_SOCKET.
// Shared by src/guest (plain C-style code, no smolvm libraries) and
// src/machine/supervisor*.cc, so this header holds constants only.
//
// Text lines ending in '\n', at most kFpMaxLine bytes. The supervisor treats
// everything the guest sends as hostile: it bounds lines, parses strictly,
// and checks the sender's host pid (SO_PEERCRED / SCM_CREDENTIALS).
//
// Golden connection (opened by smolvmForkpoint() in the golden):
//   G -> S  "HELLO"
//   S -> G  "FORK <index> <name> <share> <token>"   share: on|off|auto; token "-" if none
//           "RELEASE"                               smolvmForkpoint returns -ECANCELED
//           "ERR <errno> <text>"                    it returns -errno
//   G -> S  "FORKED <index> <pid | -errno>"         after fork(2) in the golden
//
// Clone connection (opened by the forked child C1 of the golden):
//   C1 -> S "CLONE <index>"       S checks C1's parent is the golden, moves C1
//   S -> C1 "MOVED"               into the clone's cgroup(s)
//   C1 -> S "UNSHARED"            after unshare(cgroup, mnt, uts, ipc, net, pid)
//   S -> C1 "READY" + fd          after mounting the clone's /tmp, /workspace and
//                                 cgroupfs into C1's mount namespace; the fd is
//                                 the clone's log (stdout/stderr)
//   C2 -> S "INIT"                C2 = pid 1 of the clone; S reads its host pid
//                                 from SCM_CREDENTIALS (SO_PASSCRED)
//   C2 -> S "PARKED"              the clone's program reached its park (after its
//                                 warm-up, if any: smolvm_fork_child_park); not sent
//                                 when GO came first or the program ended first
//   S -> C2 "GO"                  every clone of the request is made (and, for a
//                                 GPU fork, attached; parked: its first lease
//                                 payload came): the clone's program goes on
//                                 past its forkpoint; anything else (or EOF)
//                                 and C2 kills it
//   C2 -> S "EXIT <wait status>"  the clone's program ended (processes it left may
//                                 live on); EOF = the clone's init ended
// Any step may be answered with "ERR <errno> <text>".
#pragma once

#define SMOLVM_FP_MAX_LINE 512
#define SMOLVM_FP_GUEST_PATH "/run/smolvm/forkpoint.sock"
