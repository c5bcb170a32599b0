"""The clone's lease calls in Python (smolvm.lease_payload / next_payload /
reply / complete) against a scripted supervisor end of the link
(src/guest/lease_wire.h) on $SMOLVM_LEASE_SOCKET, without a machine. The
link through real machines is tested in src/machine/machine_lease_test.cc.
"""

import errno
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import unittest

PAYLOAD, END, ACK, REPLY, COMPLETE = 1, 2, 3, 4, 5


def frame(kind, body=b"", seq=0, payload=0):
    return struct.pack("<B3xIQQ", kind, len(body), seq, payload) + body


def read_frame(conn):
    head = b""
    while len(head) < 24:
        try:
            chunk = conn.recv(24 - len(head))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        head += chunk
    kind, length, seq, payload = struct.unpack("<B3xIQQ", head)
    body = b""
    while len(body) < length:
        body += conn.recv(length - len(body))
    return kind, payload, body


class Supervisor:
    """Accepts one clone connection, sends `frames`, records what comes back."""

    def __init__(self, frames):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "lease.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.frames = frames
        self.got = []
        self.thread = threading.Thread(target=self._serve)
        self.thread.start()

    def _serve(self):
        conn, _ = self.listener.accept()
        with conn:
            for f in self.frames:
                conn.sendall(f)
            while True:
                got = read_frame(conn)
                if got is None:
                    break
                self.got.append(got)

    def run(self, script):
        env = dict(os.environ, SMOLVM_LEASE_SOCKET=self.path)
        p = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                           timeout=60, env=env)
        self.thread.join(timeout=30)
        self.listener.close()
        os.unlink(self.path)
        os.rmdir(self.dir)
        return p.returncode, p.stdout, p.stderr


class LeaseTest(unittest.TestCase):
    def test_payloads_in_order_replies_tagged_then_the_end(self):
        s = Supervisor([frame(PAYLOAD, b'{"n": 1}', payload=1), frame(PAYLOAD, b'{"n": 2}', payload=2),
                        frame(END)])
        rc, out, err = s.run("""
            import smolvm
            first = smolvm.lease_payload()
            assert smolvm.lease_payload() == first
            p = first
            while p is not None:
                smolvm.reply({"got": p["n"]})
                p = smolvm.next_payload()
            smolvm.complete({"done": True, "x": [1.5, "\\u00e9"]})
            try:
                smolvm.reply({"late": 1})
            except smolvm.LeaseError as e:
                print("late", e.errno)
        """)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.strip(), "late %d" % errno.EPIPE)
        self.assertEqual([(k, p, json.loads(b)) for k, p, b in s.got],
                         [(REPLY, 1, {"got": 1}), (REPLY, 2, {"got": 2}),
                          (COMPLETE, 2, {"done": True, "x": [1.5, "\u00e9"]})])

    def test_next_payload_alone_starts_with_the_lease_payload(self):
        s = Supervisor([frame(PAYLOAD, b'{"n": 1}', payload=1), frame(END)])
        rc, out, err = s.run("""
            import smolvm
            print(smolvm.next_payload(), smolvm.next_payload(), smolvm.lease_payload())
        """)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.strip(), "{'n': 1} None {'n': 1}")

    def test_results_that_are_not_json_are_refused_in_the_clone(self):
        s = Supervisor([frame(PAYLOAD, b'{}', payload=1)])
        rc, out, err = s.run("""
            import smolvm
            smolvm.lease_payload()
            for bad in (float("nan"), {"x": float("inf")}, "x" * (1 << 20)):
                try:
                    smolvm.reply(bad)
                except ValueError as e:
                    print("refused", type(bad).__name__)
            smolvm.complete(1)
        """)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.split(), ["refused", "float", "refused", "dict", "refused", "str"])
        self.assertEqual([(k, b) for k, _, b in s.got], [(COMPLETE, b"1")])

    def test_a_frame_that_breaks_the_protocol_is_an_error(self):
        s = Supervisor([frame(PAYLOAD, b'{}', payload=5)])  # not payload 1
        rc, out, err = s.run("""
            import smolvm
            try:
                smolvm.lease_payload()
            except smolvm.LeaseError as e:
                print("error", e.errno)
        """)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.strip(), "error %d" % errno.EPROTO)

    def test_without_a_lease_link(self):
        env = dict(os.environ, SMOLVM_LEASE_SOCKET="/nonexistent/lease.sock")
        p = subprocess.run([sys.executable, "-c", textwrap.dedent("""
            import smolvm
            try:
                smolvm.lease_payload()
            except smolvm.LeaseError as e:
                print(e.errno, e)
        """)], capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("%d [Errno %d] smolvm.lease_payload: no lease link here" % (errno.ENOTSUP, errno.ENOTSUP), p.stdout)


if __name__ == "__main__":
    unittest.main()
