#!/usr/bin/env python3
"""Issue 30: a clean build prints no warning.

1. Compiles again, with the build's own command (compile_commands.json),
   every file in which 0fcf054's clean build printed a warning (GCC 12's
   -Wrestrict on "literal" + std::to_string(...)), and fails on any warning.
   In a unity build the file is compiled alone with the command of the batch
   that includes it.
2. Configures the clang fuzzer's inner build with the -D arguments
   tests/fuzz/CMakeLists.txt gives it, and fails when CMake says one of them
   is not used ("Manually-specified variables were not used").

Usage: build_warnings_test.py SOURCE_DIR BUILD_DIR"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

WARNED = ["src/machine/cgroups.cc", "src/machine/disk_layers.cc", "src/machine/process.cc",
          "src/machine/sandbox_rootfs.cc", "learner/data.cc", "src/bench/child.cc", "src/bench/table.cc"]


UNITY_INCLUDE = re.compile(r'^#include "(.+)"$', re.M)


def sources_of(entry):
    """The sources an entry compiles: its file, or the files a unity batch includes."""
    if "/Unity/unity_" not in entry["file"]:
        return [entry["file"]]
    with open(entry["file"]) as f:
        return UNITY_INCLUDE.findall(f.read())


def compile_again(src, build, tmp):
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    fails, seen = [], set()
    for e, path in ((e, p) for e in entries for p in sources_of(e)):
        rel = os.path.relpath(path, src)
        if rel not in WARNED or rel in seen:
            continue
        seen.add(rel)
        args = [path if a == e["file"] else a for a in shlex.split(e["command"])]
        out = args.index("-o")
        args[out + 1] = os.path.join(tmp, os.path.basename(rel) + ".o")
        args = [a for a in args if not a.startswith(("-MD", "-MF", "-MT"))]
        # ccache would replay a cached compile without its diagnostics' context: call the compiler.
        if os.path.basename(args[0]) == "ccache":
            args = args[1:]
        r = subprocess.run(args, cwd=e["directory"], capture_output=True, text=True)
        if r.returncode != 0 or "warning:" in r.stderr:
            fails.append("%s: %s" % (rel, (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]))
    missing = sorted(set(WARNED) - seen)
    fails += ["%s: not in compile_commands.json" % m for m in missing]
    return fails


def fuzz_configure(src, tmp):
    text = open(os.path.join(src, "tests/fuzz/CMakeLists.txt")).read()
    block = text[text.index("ExternalProject_Add("):]
    block = block[:block.index("BUILD_COMMAND")]
    defs = [d for d in re.findall(r"-D(SMOLVM_\w+=\S+|CMAKE_BUILD_TYPE=\S+)", block)]
    cmd = ["cmake", "-S", src, "-B", os.path.join(tmp, "fuzz"), "-G", "Ninja"] + ["-D" + d for d in defs]
    r = subprocess.run(cmd, capture_output=True, text=True)
    out = r.stdout + r.stderr
    if "not used by the project" in out:
        return ["the fuzzer's inner configure: " + " ".join(out[out.index("Manually"):].split()[:20])]
    return []


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, build = (os.path.abspath(a) for a in sys.argv[1:])
    tmp = tempfile.mkdtemp(prefix="smolvm-warnings-")
    try:
        fails = compile_again(src, build, tmp) + fuzz_configure(src, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in fails:
        print("FAIL: " + f)
    print("build warnings: " + ("PASS" if not fails else "%d" % len(fails)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
