"""The smolvm package's own PEP 517 build backend: writes the wheel (and an
sdist, an editable wheel) with the standard library alone.

Why not setuptools: in a plain venv on Debian 12 setuptools cannot build a
wheel without the `wheel` package ("invalid command 'bdist_wheel'"), and it
leaves build/ and smolvm.egg-info/ in the source tree. This backend needs no
package at build time (pyproject.toml: requires = []), so
`pip install ./python` works in any venv, offline, and writes nothing beside
the sources. The wheel holds every file under smolvm/ (no __pycache__)."""

import base64
import hashlib
import io
import os
import tarfile
import zipfile

try:
    import tomllib
except ImportError:  # Python < 3.11: read the two fields by hand below
    tomllib = None

_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE = "smolvm"


def _project():
    path = os.path.join(_HERE, "pyproject.toml")
    if tomllib is not None:
        with open(path, "rb") as f:
            return tomllib.load(f)["project"]
    project, section = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("["):
                section = line
            elif section == "[project]" and "=" in line:
                key, value = (part.strip() for part in line.split("=", 1))
                if value.startswith('"'):
                    project[key] = value.strip('"')
    return project


def _metadata():
    p = _project()
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"],
             "Summary: " + p.get("description", ""), "Requires-Python: " + p.get("requires-python", ">=3.9"),
             "Description-Content-Type: text/markdown", ""]
    readme = os.path.join(_HERE, "README.md")
    body = open(readme, encoding="utf-8").read() if os.path.exists(readme) else ""
    return ("\n".join(lines) + "\n" + body).encode("utf-8")


def _dist_info():
    p = _project()
    return "%s-%s.dist-info" % (p["name"], p["version"]), "%s-%s-py3-none-any.whl" % (p["name"], p["version"])


def _package_files():
    root = os.path.join(_HERE, _PACKAGE)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(dirpath, name)
            yield full, os.path.relpath(full, _HERE).replace(os.sep, "/")


def _write_wheel(wheel_directory, entries):
    """entries: (archive name, bytes). Adds the dist-info files and RECORD."""
    dist_info, wheel_name = _dist_info()
    entries = list(entries) + [
        (dist_info + "/METADATA", _metadata()),
        (dist_info + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: smolvm build_backend\nRoot-Is-Purelib: true\n"
                               b"Tag: py3-none-any\n"),
    ]
    record = []
    path = os.path.join(wheel_directory, wheel_name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            z.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
        record.append(dist_info + "/RECORD,,")
        z.writestr(dist_info + "/RECORD", "\n".join(record) + "\n")
    return wheel_name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = [(arc, open(full, "rb").read()) for full, arc in _package_files()]
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth naming this directory: the installed package is the source tree.
    return _write_wheel(wheel_directory, [("_smolvm_editable.pth", (_HERE + "\n").encode("utf-8"))])


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = "%s-%s" % (p["name"], p["version"])
    path = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(path, "w:gz") as tar:
        names = ["pyproject.toml", "build_backend.py", "README.md"]
        for name in names:
            if os.path.exists(os.path.join(_HERE, name)):
                tar.add(os.path.join(_HERE, name), arcname=base + "/" + name)
        for full, arc in _package_files():
            tar.add(full, arcname=base + "/" + arc)
        info = tarfile.TarInfo(base + "/PKG-INFO")
        meta = _metadata()
        info.size = len(meta)
        tar.addfile(info, io.BytesIO(meta))
    return base + ".tar.gz"
