"""The training loop's side of smolvm serve: pools of forked learners, leased.

    import smolvm
    c = smolvm.Client()                      # $SMOLVM_HOME/serve.sock unless told otherwise
    pool = c.create_pool("p", golden=dict(cmd=["python3", "/job/train.py"],
                                          volumes=["/data:/job:ro"], cuda=True, env={}),
                         min_ready=16)
    with pool.lease(8, payload={"prompts": [...]}) as lease:   # released on exit
        results = lease.results(timeout=600)  # one dict per clone, from smolvm.complete()
    c.pool("p").delete()                     # removes its machines

Standard library only: http.client over the Unix socket (or TCP with a
bearer token, TLS beyond loopback). While a Lease is held a background
thread heart-beats it, so the lease lives as long as the loop does and
ends at its TTL when the loop dies. The REST API is docs/serve.md.
"""

import http.client
import json
import os
import socket
import ssl
import threading
import time
import urllib.parse
import uuid

__all__ = ["Client", "Pool", "Lease", "ServeError", "LeaseFailed"]


class ServeError(Exception):
    """serve refused a request: .status (HTTP), .code (e.g. "not_found"), .message."""

    def __init__(self, status, code, message):
        super().__init__("%s (%s %s)" % (message, status, code))
        self.status = status
        self.code = code
        self.message = message


class LeaseFailed(ServeError):
    """A member of the lease ended without answering its episode (its program
    exited, broke the protocol, or the lease expired), or a payload was not
    delivered. .lease is the lease's state; .results the answers of the
    episode's members (None for those that gave none)."""

    def __init__(self, lease, failed, results=None):
        why = "; ".join("member %d (%s): %s" % (i, m.get("machine"), m.get("detail") or m.get("state"))
                        for i, m in failed)
        super().__init__(200, "lease_failed", "lease %s: %s" % (lease.get("id"), why))
        self.lease = lease
        self.results = results if results is not None else [
            m.get("result") if m.get("state") == "completed" else None for m in lease.get("members", [])]


def default_socket():
    """$SMOLVM_SERVE_SOCKET, else $SMOLVM_HOME/serve.sock, else ~/.local/share/smolvm/serve.sock."""
    if os.environ.get("SMOLVM_SERVE_SOCKET"):
        return os.environ["SMOLVM_SERVE_SOCKET"]
    home = os.environ.get("SMOLVM_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share", "smolvm")
    return os.path.join(home, "serve.sock")


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError as e:
            s.close()
            raise ServeError(503, "unavailable", "serve does not answer at %s (%s): start it with 'smolvm serve'"
                             % (self._path, e.strerror or e)) from None
        self.sock = s


class Client:
    """A connection to serve. Thread-safe: each request opens its own connection.

    Client()                                  the Unix socket (default_socket())
    Client("/path/serve.sock")                another socket
    Client(url="https://host:8443", token=T, cafile=...)   TCP with a bearer token
    """

    def __init__(self, socket_path=None, *, url=None, token=None, cafile=None, timeout=60.0):
        self._socket = None if url else (socket_path or default_socket())
        self._url = urllib.parse.urlsplit(url) if url else None
        self._token = token
        self._cafile = cafile
        self.timeout = timeout

    # -- transport --------------------------------------------------------------------------------
    def _connection(self, timeout):
        if self._socket:
            return _UnixConnection(self._socket, timeout)
        u = self._url
        if u.scheme == "https":
            ctx = ssl.create_default_context(cafile=self._cafile)
            return http.client.HTTPSConnection(u.hostname, u.port or 443, timeout=timeout, context=ctx)
        return http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)

    def request(self, method, path, body=None, *, timeout=None, headers=None, raw=False):
        """One API call; the decoded JSON answer (the text with raw=True). ServeError otherwise."""
        conn = self._connection(self.timeout if timeout is None else timeout)
        try:
            h = {"Host": "serve"}
            if body is not None:
                data = json.dumps(body).encode()
                h["Content-Type"] = "application/json"
            else:
                data = None
            if self._token:
                h["Authorization"] = "Bearer " + self._token
            h.update(headers or {})
            try:
                conn.request(method, path, body=data, headers=h)
                resp = conn.getresponse()
                text = resp.read().decode("utf-8", "replace")
            except (OSError, http.client.HTTPException) as e:
                if isinstance(e, ServeError):
                    raise
                raise ServeError(503, "unavailable", "serve went away during %s %s: %s" % (method, path, e)) from None
            if resp.status >= 300:
                try:
                    err = json.loads(text)["error"]
                    raise ServeError(resp.status, err.get("code", "error"), err.get("message", text))
                except (ValueError, KeyError, TypeError):
                    raise ServeError(resp.status, "error", text.strip()) from None
            if raw:
                return text
            return json.loads(text) if text.strip() else {}
        finally:
            conn.close()

    # -- resources --------------------------------------------------------------------------------
    def health(self):
        return self.request("GET", "/v1/health")

    def capacity(self):
        return self.request("GET", "/v1/capacity")

    def metrics(self):
        """Prometheus text (the operator's)."""
        return self.request("GET", "/v1/metrics", raw=True)

    def create_pool(self, name, golden, *, min_ready=0, max=0, share="off", cpus=0, mem_mib=0, gpu_mem_mib=0,
                    ttl_s=600):
        """A new pool: its golden (dict: cmd, volumes, env, cuda, pack, workdir) starts once and
        min_ready clones are kept parked for leases."""
        body = {"name": name, "golden": dict(golden), "min_ready": min_ready, "max": max, "share": share,
                "cpus": cpus, "mem_mib": mem_mib, "gpu_mem_mib": gpu_mem_mib, "ttl_s": ttl_s}
        return Pool(self, self.request("POST", "/v1/pools", body, timeout=max_timeout(self.timeout, 300)))

    def pool(self, name):
        """An existing pool (ServeError 404 when there is none of the caller's)."""
        return Pool(self, self.request("GET", "/v1/pools/" + _q(name)))

    def pools(self):
        return [Pool(self, p) for p in self._all("/v1/pools")]

    def lease(self, lease_id, *, heartbeat=True):
        """Adopts an existing lease (e.g. after the loop restarted), heart-beating it."""
        return Lease(self, self.request("GET", "/v1/leases/" + _q(lease_id)), heartbeat=heartbeat)

    def leases(self, pool=None):
        return self._all("/v1/leases" + ("?pool=" + _q(pool) if pool else ""))

    def _all(self, path):
        items, after = [], None
        while True:
            sep = "&" if "?" in path else "?"
            page = self.request("GET", path + sep + "limit=1000" + ("&after=" + _q(after) if after else ""))
            items.extend(page["items"])
            after = page.get("next")
            if not after:
                return items


def max_timeout(a, b):
    return a if a is None else max(a, b)


def _q(s):
    return urllib.parse.quote(str(s), safe="")


class Pool:
    """A pool of the caller's. .info is serve's view (ready, forking, leased, detail, ...)."""

    def __init__(self, client, info):
        self.client = client
        self.info = info
        self.name = info["name"]

    def __repr__(self):
        return "Pool(%r, ready=%s, leased=%s)" % (self.name, self.info.get("ready"), self.info.get("leased"))

    def refresh(self):
        self.info = self.client.request("GET", "/v1/pools/" + _q(self.name))
        return self

    @property
    def ready(self):
        return self.refresh().info["ready"]

    def lease(self, count=1, payload=None, *, payloads=None, wait=60.0, ttl=None, all_or_nothing=True,
              idempotency_key=None, heartbeat=True):
        """Leases count clones (all of them, or none unless all_or_nothing=False), each released with
        payload (a dict; or payloads, one per clone), waiting up to wait seconds for ready ones.
        A retry with the same idempotency_key (one is made when none is given) returns the same
        lease, so a dropped connection never leases twice. Use it in a with statement: the lease
        is released on exit. Heartbeats run in a background thread while it is held."""
        body = {"count": count, "wait_s": wait, "all_or_nothing": all_or_nothing}
        if payloads is not None:
            body["payloads"] = list(payloads)
        else:
            body["payload"] = {} if payload is None else payload
        if ttl is not None:
            body["ttl_s"] = int(ttl)
        key = idempotency_key or uuid.uuid4().hex
        path = "/v1/pools/" + _q(self.name) + "/leases"
        timeout = max_timeout(self.client.timeout, wait + 30)
        for attempt in range(3):
            try:
                info = self.client.request("POST", path, body, timeout=timeout, headers={"Idempotency-Key": key})
                return Lease(self.client, info, heartbeat=heartbeat)
            except ServeError as e:
                # serve went away mid-request: the key makes the retry safe.
                if e.code != "unavailable" or e.status != 503 or "went away" not in e.message or attempt == 2:
                    raise
                time.sleep(0.5 * (attempt + 1))

    def cancel_acquire(self, idempotency_key):
        """Cancels a waiting acquire made with this key (it raises ServeError 409 cancelled)."""
        return self.client.request("DELETE", "/v1/pools/%s/acquires/%s" % (_q(self.name), _q(idempotency_key)))

    def drain(self, draining=True):
        self.info = self.client.request("POST", "/v1/pools/" + _q(self.name) + "/drain", {"draining": draining})
        return self

    def replace_golden(self, **golden):
        self.info = self.client.request("PUT", "/v1/pools/" + _q(self.name) + "/golden", golden,
                                        timeout=max_timeout(self.client.timeout, 300))
        return self

    def delete(self):
        """Ends the pool's leases and removes its machines."""
        self.client.request("DELETE", "/v1/pools/" + _q(self.name))


class Lease:
    """K clones held for the loop. .id, .info (serve's view), .members."""

    def __init__(self, client, info, *, heartbeat=True):
        self.client = client
        self.info = info
        self.id = info["id"]
        self._stop = threading.Event()
        self._thread = None
        self.heartbeat_error = None  # the last heartbeat's failure, if any (serve restarting, say)
        if heartbeat and info.get("state") == "active":
            self._thread = threading.Thread(target=self._beat, name="smolvm-heartbeat-" + self.id, daemon=True)
            self._thread.start()

    def __repr__(self):
        return "Lease(%r, %s, %d members)" % (self.id, self.info.get("state"), len(self.info.get("members", [])))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    def _beat(self):
        interval = max(0.2, self.info.get("ttl_ms", 600000) / 3000.0)
        while not self._stop.wait(interval):
            try:
                self.client.request("POST", "/v1/leases/%s/heartbeat" % _q(self.id), timeout=max(interval, 5.0))
                self.heartbeat_error = None
            except ServeError as e:
                self.heartbeat_error = e
                if e.status in (404, 409):  # released, expired: nothing left to keep alive
                    return

    @property
    def members(self):
        return self.info.get("members", [])

    @property
    def state(self):
        return self.refresh().info["state"]

    def refresh(self):
        self.info = self.client.request("GET", "/v1/leases/" + _q(self.id))
        return self

    @property
    def episode(self):
        """The lease's latest episode (1: the acquire's payloads; each send() the next)."""
        return self.info.get("episode", 1)

    @property
    def learners(self):
        """The members that take payloads (running, not ended or dropped), as of the last answer
        from serve: send(payloads=...) takes one payload per learner, in this order."""
        return [i for i, m in enumerate(self.members)
                if m["state"] == "running" and not m.get("ending") and not m.get("dropped")]

    def results(self, timeout=None):
        """The answers to the lease's latest episode, one per clone of it, in member order: each
        clone's first smolvm.reply() to its payload, or what it passed to smolvm.complete() when it
        completed first (a lease used once: its result). After end() or complete(): each clone's
        result. Waits up to timeout seconds (None: as long as it takes); TimeoutError then.
        LeaseFailed when a clone ended without answering (its exit status and why are in the
        message)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 60.0 if deadline is None else max(0.0, min(60.0, deadline - time.monotonic()))
            self.info = self.client.request("GET", "/v1/leases/%s/results?wait_s=%.3f" % (_q(self.id), left),
                                            timeout=left + 30)
            members = self._episode_members()
            if self.info["state"] != "active" or all(m.get("answered") or m["state"] != "running" for _, m in members):
                break
            if deadline is not None and time.monotonic() >= deadline:
                done = sum(1 for _, m in members if m.get("answered") or m["state"] != "running")
                raise TimeoutError("lease %s: %d of %d clones answered episode %d within %ss"
                                   % (self.id, done, len(members), self.episode, timeout))
        failed = [(i, m) for i, m in members if not m.get("answered")]
        if failed:
            raise LeaseFailed(self.info, failed, [m.get("answer") if m.get("answered") else None for _, m in members])
        return [m["answer"] for _, m in members]

    def _episode_members(self):
        e = self.episode
        return [(i, m) for i, m in enumerate(self.members) if m.get("episode") == e and not m.get("dropped")]

    def send(self, payload=None, *, payloads=None, member=None):
        """The next episode: payload (a dict) for every learner, or payloads, one per learner in
        the order of .learners; each clone's smolvm.next_payload() takes its own, and
        results() then returns the answers. With member=i: one more payload for that clone
        alone, within the current episode. Returns the episode's number. Raises ServeError 409
        when payloads does not match the learners (refresh() and look at .learners)."""
        if (payload is None) == (payloads is None):
            raise ValueError("send: give payload (one for all) or payloads (one per learner)")
        body = {"payload": payload} if payloads is None else {"payloads": list(payloads)}
        if member is not None:
            body["member"] = member
        r = self.client.request("POST", "/v1/leases/%s/payloads" % _q(self.id), body)
        self.info["episode"] = r["episode"]  # a clone whose payload was not delivered fails: results() says so
        return r["episode"]

    def end(self, member=None):
        """No more payloads, for one member or (None) for all: the clones' next_payload() returns
        None and each finishes with smolvm.complete() (for all: results() then returns those
        results). A member that never got a payload is dropped instead."""
        body = {} if member is None else {"member": member}
        self.info = self.client.request("POST", "/v1/leases/%s/end" % _q(self.id), body)
        return self

    def finish(self, timeout=None):
        """end() for every learner, then their results (what each passed to smolvm.complete())."""
        self.end()
        return self.results(timeout=timeout)

    def add(self, count=1, payload=None, *, payloads=None, wait=60.0, all_or_nothing=True):
        """count more parked clones of the lease's pool as new learners (the pool refills
        behind them). With payload (or payloads, one each) they join the current episode
        at once; without, the next send() releases them with their first payload.
        Returns the new members' indices."""
        before = len(self.members)
        body = {"count": count, "wait_s": wait, "all_or_nothing": all_or_nothing}
        if payloads is not None:
            body["payloads"] = list(payloads)
        elif payload is not None:
            body["payload"] = payload
        self.info = self.client.request("POST", "/v1/leases/%s/members" % _q(self.id), body,
                                        timeout=max_timeout(self.client.timeout, wait + 30))
        return list(range(before, len(self.members)))

    def drop(self, member):
        """Drops a member at once: its clone is reclaimed and removed; it is in no episode from
        then on (end(member) lets it finish instead)."""
        self.info = self.client.request("DELETE", "/v1/leases/%s/members/%d" % (_q(self.id), member))
        return self

    def replies(self):
        """Each member's replies so far (smolvm.reply()), in order."""
        return [m.get("replies", []) for m in self.refresh().members]

    def heartbeat(self):
        return self.client.request("POST", "/v1/leases/%s/heartbeat" % _q(self.id))

    def complete(self, result=None):
        """Ends the running clones from the loop's side with this result."""
        self.info = self.client.request("POST", "/v1/leases/%s/complete" % _q(self.id), {"result": result})
        return self

    def logs(self, member=0, offset=0):
        """(text, next_offset, running) of a member's output from offset; call again with
        next_offset to follow it."""
        r = self.client.request("GET", "/v1/leases/%s/logs?member=%d&offset=%d" % (_q(self.id), member, offset))
        return r["data"], r["next_offset"], r["running"]

    def exec(self, cmd, member=0, timeout=60):
        """Runs cmd (a list) in a running member's clone: {exit_code, stdout, stderr, timed_out}."""
        return self.client.request("POST", "/v1/leases/%s/exec" % _q(self.id),
                                   {"cmd": list(cmd), "member": member, "timeout_s": timeout},
                                   timeout=max_timeout(self.client.timeout, timeout + 30))

    def release(self):
        """Stops the heartbeats and gives the clones back (they are removed). Idempotent."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        try:
            self.client.request("DELETE", "/v1/leases/" + _q(self.id))
        except ServeError as e:
            if e.status != 404:
                raise
