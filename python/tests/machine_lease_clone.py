"""A Python golden whose clones are leased (src/machine/machine_lease_test.cc),
without torch: waits at smolvm.forkpoint(); each clone touches
OUT/ran-<index> (its user code runs), then takes its payloads, each
{"op": ...}:
  echo      reply {"k": K, "got": payload}   (K: the payload's number)
  exit      exit 3 without completing
  complete  complete({"done": K})
and, once the host ends the lease, complete({"ended": True, "k": K}).

    python3 machine_lease_clone.py OUT
"""

import os
import sys

import smolvm

out = sys.argv[1]
print("golden ready", flush=True)
idx = smolvm.forkpoint()
if idx is None:
    sys.exit(0)
open(os.path.join(out, "ran-%d" % idx), "w").close()
print("clone %d runs" % idx, flush=True)

k = 0
episode = smolvm.lease_payload()
assert smolvm.lease_payload() == episode  # the same payload each call
while episode is not None:
    k += 1
    op = episode.get("op")
    if op == "echo":
        smolvm.reply({"k": k, "got": episode})
    elif op == "exit":
        os._exit(3)
    elif op == "complete":
        smolvm.complete({"done": k})
        try:
            smolvm.reply({"late": True})
        except smolvm.LeaseError as e:
            print("late reply refused errno=%d" % e.errno, flush=True)
        sys.exit(0)
    episode = smolvm.next_payload()
smolvm.complete({"ended": True, "k": k})
