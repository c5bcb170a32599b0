"""The README's `smolvm serve` section, run as written (issue 31, must-show 3):
its `pip install` line installs the package into a fresh venv (from the
source tree, offline), its `serve tenant add ... --uid "$(id -u)"` line lets a
uid in, and its Python block (at most ten lines) runs, as that uid, with
the venv's python from outside the tree, against `smolvm serve --driver
fake` on a temporary $SMOLVM_HOME (clones in memory: the golden's command
is not run; each clone echoes its payload). Needs root (a tenant's uid
other than the operator's) and python3-venv; exits 77 (skipped) saying why
otherwise. Run by CTest as serve_readme with $SMOLVM_BINARY set."""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UID = 1001
SKIP = 77


def section(readme):
    start = readme.index("## Learners for a training loop: `smolvm serve`")
    end = re.compile(r"\n##+ ").search(readme, start + 1).start()  # the section's own text, up to its first subsection
    text = readme[start:end]
    blocks = re.findall(r"```(\w+)\n(.*?)```", text, re.S)
    bash = [b for lang, b in blocks if lang == "bash"]
    python = [b for lang, b in blocks if lang == "python"]
    assert len(bash) == 1 and len(python) == 1, "the section has one bash and one python block"
    return bash[0], python[0]


def main():
    binary = os.environ.get("SMOLVM_BINARY")
    if not binary:
        print("SKIP: SMOLVM_BINARY is not set (CTest sets it)")
        return SKIP
    if os.geteuid() != 0:
        print("SKIP: needs root (the loop runs as a tenant's uid, the operator adds it)")
        return SKIP
    py = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    if subprocess.run([py, "-c", "import venv, ensurepip"], capture_output=True).returncode != 0:
        print("SKIP: %s lacks venv/ensurepip (scripts/setup.sh installs python3-venv)" % py)
        return SKIP
    with open(os.path.join(ROOT, "README.md")) as f:
        bash, code = section(f.read())
    lines = [l for l in code.splitlines() if l.strip()]
    assert len(lines) <= 10, "the README's client is %d lines, not ten at most" % len(lines)
    pip_line = [l for l in bash.splitlines() if l.startswith("pip install")]
    tenant_line = [l for l in bash.splitlines() if " serve tenant add " in l]
    assert len(pip_line) == 1 and len(tenant_line) == 1, bash

    tmp = tempfile.mkdtemp(prefix="serve-readme-")
    os.chmod(tmp, 0o755)
    home = os.path.join(tmp, "home")
    os.mkdir(home, 0o755)
    env = dict(os.environ, SMOLVM_HOME=home)
    env.pop("SMOLVM_SERVE_SOCKET", None)
    env.pop("PYTHONPATH", None)
    log = open(os.path.join(tmp, "serve.log"), "w")
    proc = subprocess.Popen([binary, "serve", "--driver", "fake"], env=env, stdout=log, stderr=log)
    try:
        subprocess.run([py, "-m", "venv", os.path.join(tmp, "venv")], check=True)
        # The README's pip line, with the venv's pip, from the repository root ("./python").
        argv = shlex.split(pip_line[0].split("#")[0])
        argv[0] = os.path.join(tmp, "venv", "bin", "pip")
        subprocess.run(argv, cwd=ROOT, check=True, env=dict(env, PIP_NO_INDEX="1"))
        deadline = time.monotonic() + 30
        while "serve: listening" not in open(os.path.join(tmp, "serve.log")).read():
            assert proc.poll() is None and time.monotonic() < deadline, open(os.path.join(tmp, "serve.log")).read()
            time.sleep(0.02)
        # The README's tenant line: sudo and SMOLVM_HOME=... stand for this test's root and home.
        words = shlex.split(tenant_line[0].split("#")[0].replace('"$(id -u)"', str(UID)))
        words = words[words.index("serve"):]
        subprocess.run([binary] + words, env=env, check=True)
        check = ("\nassert len(results) == 8, results\n"
                 "assert all(r['echo'] == {'prompts': ['...']} for r in results), results\n"
                 "assert len({r['machine'] for r in results}) == 8, results\n"
                 "assert not c.pools(), c.pools()\n"
                 "assert smolvm.__file__.startswith(%r), smolvm.__file__\n"
                 "print('the README loop ran: 8 results')\n" % os.path.join(tmp, "venv"))

        def become():
            os.setgid(UID)
            os.setuid(UID)
        r = subprocess.run([os.path.join(tmp, "venv", "bin", "python"), "-c", code + check], cwd=tmp, env=env,
                           preexec_fn=become, capture_output=True, text=True, timeout=120)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        return r.returncode
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
