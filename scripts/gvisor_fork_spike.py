#!/usr/bin/env python3
"""The gVisor fork spike (issue 35, item 4): can a gVisor golden be forked whole?

A golden guest (a Python process; with --golden torch it imports torch and
transformers first, or the modules --imports names) dials its endpoint (a host Unix socket reached through
runsc's host-UDS path), learns that it is the golden, closes the connection
(gVisor cannot save a host-backed descriptor) and waits, re-dialling. runsc
checkpoints it; N sandboxes are restored from the one image, each with its
own bundle whose endpoint (the same guest path, another host socket) answers
"clone-K": each restore re-dials and learns its clone index from its own
endpoint, since N restores of one image are byte-identical.

Measured: the golden's time to its forkpoint (imports included) and the same
imports natively, the checkpoint's time and image size, each restore's time
(restore started -> its guest dialled its own endpoint), each restored
sandbox's sentry RSS. --hold-check also checkpoints a golden that keeps its
connection open (expected to fail). Writes one JSON record to --out.

Needs root and runsc. Usage:
  scripts/gvisor_fork_spike.py [--runsc PATH] [--platform ptrace|kvm]
      [--golden python|torch] [--imports MOD,...] [--python PATH] [--ballast-mib N] [--restores N]
      [--bind HOST:GUEST]... [--hold-check] [--out DIR]
"""
import argparse
import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

GUEST = r'''
import os, socket, sys, time
t0 = time.time()
for name in filter(None, os.environ.get("IMPORTS", "").split(",")):
    __import__(name)
import_s = time.time() - t0
EP = "/run/ep/endpoint.sock"
def dial(keep=False):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(EP)
    s.sendall(b"hello\n")
    who = s.recv(256).decode().strip()
    if keep:
        return who, s
    s.close()  # no host-UDS descriptor may be open at the checkpoint
    return who, None
while True:
    try:
        who, held = dial(keep=os.environ.get("HOLD") == "1")
        break
    except OSError:
        time.sleep(0.05)
mib = int(os.environ.get("BALLAST_MIB", "0"))
ballast = bytearray(os.urandom(1 << 20)) * mib if mib else b""
print("golden", who, "import_s %.3f" % import_s, flush=True)
print("at-forkpoint", flush=True)
while True:
    try:
        now, _ = dial()
    except OSError:
        time.sleep(0.005)
        continue
    if now != who:
        print("restored as", now, flush=True)
        who = now
        break
while True:
    time.sleep(1)
'''


class Endpoint:
    """A host Unix socket answering each connection with `ident`; `once`: it
    goes away after its first dial (the golden's, before the checkpoint)."""

    def __init__(self, directory, ident, once=False):
        os.makedirs(directory, exist_ok=True)
        self.dir = directory
        self.path = os.path.join(directory, "endpoint.sock")
        self.ident = ident
        self.dials = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o777)
        self.sock.listen(8)
        self.once = once
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.dials.append(time.time())
            try:
                c.recv(256)
                c.sendall((self.ident + "\n").encode())
            except OSError:
                pass
            if not self.once:
                c.close()
            else:
                self.held = c  # --hold-check: the guest may keep it open
                self.close()
                return

    def close(self):
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.sock.close()


def bundle(path, ep_dir, workdir, args, env):
    root = os.path.join(path, "root")
    os.makedirs(root)
    for link in ("bin", "sbin", "lib", "lib64"):
        if os.path.islink("/" + link):
            os.symlink(os.readlink("/" + link), os.path.join(root, link))
    binds = [("/usr", "/usr"), ("/etc", "/etc"), (ep_dir, "/run/ep"), (workdir + "/guest", "/opt/spike")]
    for b in args.bind:
        host, guest = b.split(":", 1)
        binds.append((host, guest))
    for _, guest in binds:
        os.makedirs(root + guest, exist_ok=True)
    for d in ("proc", "sys", "dev", "tmp"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    mounts = [{"destination": "/proc", "type": "proc", "source": "proc"},
              {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["size=256m"]}]
    mounts += [{"destination": g, "type": "bind", "source": h, "options": ["rbind", "ro"]} for h, g in binds]
    config = {
        "ociVersion": "1.0.2",
        "process": {"user": {"uid": 0, "gid": 0}, "args": [args.python, "-u", "/opt/spike/guest.py"],
                    "env": ["PATH=/usr/bin:/bin", "HOME=/tmp"] + env, "cwd": "/tmp"},
        "root": {"path": root, "readonly": True},
        "hostname": "spike",
        "mounts": mounts,
        "linux": {"namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "network")]},
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)


def wait_for(path, text, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(path) as f:
                if text in f.read():
                    return True
        except FileNotFoundError:
            pass
        time.sleep(0.02)
    return False


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runsc", default=os.environ.get("SMOLVM_RUNSC") or shutil.which("runsc") or "/usr/bin/runsc")
    ap.add_argument("--platform", default="ptrace")
    ap.add_argument("--golden", choices=["python", "torch"], default="python")
    ap.add_argument("--imports", default=None,
                    help="modules the golden imports, comma-separated (torch: torch,transformers; python: none)")
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--ballast-mib", type=int, default=256)
    ap.add_argument("--restores", type=int, default=4)
    ap.add_argument("--bind", action="append", default=[])
    ap.add_argument("--hold-check", action="store_true")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    if args.imports is None:
        args.imports = "torch,transformers" if args.golden == "torch" else ""

    # The interpreter's own installation (a venv's base), when /usr does not hold it.
    base = subprocess.run([args.python, "-c", "import sys; print(sys.base_prefix)"], capture_output=True,
                          text=True).stdout.strip()
    bound = ["/usr"] + [b.split(":", 1)[1] for b in args.bind]
    if base and not any(base == g or base.startswith(g.rstrip("/") + "/") for g in bound):
        args.bind.append(base + ":" + base)
    runsc_version = subprocess.run([args.runsc, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    workdir = tempfile.mkdtemp(prefix="smolvm-gvspike-", dir="/tmp")
    os.chmod(workdir, 0o755)
    os.makedirs(workdir + "/guest")
    with open(workdir + "/guest/guest.py", "w") as f:
        f.write(GUEST)
    state = workdir + "/state"
    os.makedirs(state)
    prefix = "gvspike-%d-" % os.getpid()
    flags = [args.runsc, "--root=" + state, "--platform=" + args.platform, "--network=none", "--host-uds=open"]
    env = ["GOLDEN=" + args.golden, "IMPORTS=" + args.imports, "BALLAST_MIB=%d" % args.ballast_mib]
    started, endpoints, procs = [], [], []
    record = {"kind": "gvisor-fork-spike", "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
              "command": " ".join(sys.argv), "runsc": runsc_version, "platform": args.platform,
              "golden": args.golden, "imports": args.imports, "python": args.python, "ballast_mib": args.ballast_mib,
              "host": {"cpus": os.cpu_count(), "kernel": os.uname().release}}
    try:
        with open("/proc/cpuinfo") as f:
            record["host"]["cpu"] = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(os.path.abspath(__file__)))
        record["source_commit"] = commit.stdout.strip()
        record["build"] = record["source_commit"][:12]
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True) if shutil.which("nvidia-smi") else None
        if smi is not None and smi.returncode == 0 and smi.stdout.strip():
            record["card"] = " / ".join(x.strip() for x in smi.stdout.splitlines()[0].split(","))
        else:
            record["card"] = "no GPU: %s x%d" % (record["host"].get("cpu", "CPU"), os.cpu_count())

        # The same imports natively, for comparison.
        t = time.time()
        imports = "".join("import %s\n" % m for m in filter(None, args.imports.split(","))) or "pass"
        subprocess.run([args.python, "-c", imports], check=True)
        record["native_import_s"] = round(time.time() - t, 3)

        def start(name, ep_ident, extra_env, once=False):
            ep = Endpoint(os.path.join(workdir, "ep-" + name), ep_ident, once=once)
            endpoints.append(ep)
            b = os.path.join(workdir, "bundle-" + name)
            bundle(b, ep.dir, workdir, args, env + extra_env)
            return ep, b

        if args.hold_check:
            ep, b = start("hold", "golden", ["HOLD=1"], once=True)
            out = os.path.join(workdir, "hold.out")
            procs.append(subprocess.Popen(flags + ["run", "--bundle", b, prefix + "hold"],
                                          stdout=open(out, "w"), stderr=subprocess.STDOUT))
            started.append(prefix + "hold")
            ok = wait_for(out, "at-forkpoint", args.timeout)
            img = os.path.join(workdir, "img-hold")
            os.makedirs(img)
            r = subprocess.run(flags + ["checkpoint", "--image-path", img, prefix + "hold"],
                               capture_output=True, text=True)
            st = subprocess.run(flags[:2] + ["state", prefix + "hold"], capture_output=True, text=True)
            try:
                after = json.loads(st.stdout)["status"]
            except (ValueError, KeyError):
                after = "gone"
            record["hold_check"] = {"reached_forkpoint": ok, "checkpoint_rc": r.returncode, "sandbox_after": after,
                                    "image_bytes": dir_bytes(img), "error": (r.stderr or r.stdout).strip()[-300:]}
            shutil.rmtree(img, ignore_errors=True)

        ep, b = start("golden", "golden", [], once=True)
        out = os.path.join(workdir, "golden.out")
        t = time.time()
        procs.append(subprocess.Popen(flags + ["run", "--bundle", b, prefix + "golden"],
                                      stdout=open(out, "w"), stderr=subprocess.STDOUT))
        started.append(prefix + "golden")
        if not wait_for(out, "at-forkpoint", args.timeout):
            raise SystemExit("the golden did not reach its forkpoint: " + open(out).read()[-2000:])
        record["golden_ready_s"] = round(time.time() - t, 3)
        line = next(l for l in open(out) if l.startswith("golden "))
        record["guest_import_s"] = float(line.split("import_s")[1])

        img = os.path.join(workdir, "img")
        os.makedirs(img)
        t = time.time()
        r = subprocess.run(flags + ["checkpoint", "--image-path", img, prefix + "golden"], capture_output=True, text=True)
        record["checkpoint_s"] = round(time.time() - t, 3)
        if r.returncode != 0:
            raise SystemExit("checkpoint failed: " + r.stderr + r.stdout)
        record["image_bytes"] = dir_bytes(img)

        restores = []
        for k in range(args.restores):
            ep, b = start("clone%d" % k, "clone-%d" % k, [])
            out = os.path.join(workdir, "clone%d.out" % k)
            t = time.time()
            procs.append(subprocess.Popen(flags + ["restore", "--image-path", img, "--bundle", b, prefix + "clone%d" % k],
                                          stdout=open(out, "w"), stderr=subprocess.STDOUT))
            started.append(prefix + "clone%d" % k)
            learned = wait_for(out, "restored as clone-%d" % k, args.timeout)
            dial = ep.dials[0] if ep.dials else None
            restores.append({"index": k, "learned_its_index": learned,
                             "restore_s": round(dial - t, 3) if dial else None})
        for k, rs in enumerate(restores):
            st = subprocess.run(flags[:2] + ["state", prefix + "clone%d" % k], capture_output=True, text=True)
            try:
                pid = json.loads(st.stdout)["pid"]
                with open("/proc/%d/status" % pid) as f:
                    rs["sentry_rss_kib"] = int(next(l for l in f if l.startswith("VmRSS")).split()[1])
            except (ValueError, KeyError, StopIteration, OSError):
                rs["sentry_rss_kib"] = None
        record["restores"] = restores
        times = sorted(r["restore_s"] for r in restores if r["restore_s"] is not None)
        record["summary"] = {
            "clones_ok": sum(r["learned_its_index"] for r in restores),
            "restores": args.restores,
            "image_mib": round(record["image_bytes"] / 2**20, 1),
            "checkpoint_s": record["checkpoint_s"],
            "restore_s_median": times[len(times) // 2] if times else None,
            "golden_ready_s": record["golden_ready_s"],
            "guest_import_s": record["guest_import_s"],
            "native_import_s": record["native_import_s"],
        }
        if "hold_check" in record:
            record["summary"]["checkpoint_with_open_host_uds_fails"] = record["hold_check"]["checkpoint_rc"] != 0
    finally:
        for cid in started:
            subprocess.run(flags[:2] + ["delete", "--force", cid], capture_output=True)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        for ep in endpoints:
            ep.close()
        shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(args.out, exist_ok=True)
    name = "gvisor-fork-spike_%s_%s.json" % (args.golden, time.strftime("%Y%m%d-%H%M%S"))
    with open(os.path.join(args.out, name), "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(json.dumps(record["summary"]))
    print("record:", os.path.join(args.out, name))


if __name__ == "__main__":
    main()
