"""A golden for serve's machine tests (python/tests/serve_machine_test.py,
serve_churn_test.py with SERVE_DRIVER=machine): waits at its forkpoint; each
clone takes its lease's payload and
  {"crash": N}  exits with code N without completing
  {"hold": 1}   replies {"got": p} to each further payload until the lease ends
  otherwise     completes {"idx", "echo": payload, "pid", "host"}
Each clone prints "clone IDX got PAYLOAD" first (its log). Inside its
machine a clone's program is pid 2, as the golden's is (each clone has its
own pid namespace, pid 1 its init): "host" (its hostname, the clone's
machine name) tells clones apart."""

import json
import os
import socket
import sys

import smolvm

idx = smolvm.forkpoint()
if idx is None:
    sys.exit(0)
p = smolvm.lease_payload()
print("clone %d got %s" % (idx, json.dumps(p, sort_keys=True)), flush=True)
if p.get("crash"):
    os._exit(int(p["crash"]))
if p.get("hold"):
    while True:
        q = smolvm.next_payload()
        if q is None:
            break
        smolvm.reply({"got": q})
smolvm.complete({"idx": idx, "echo": p, "pid": os.getpid(), "host": socket.gethostname()})
