"""A PEP 517 build backend for the pure-Python corral package, standard
library only: a wheel is a zip of corral/*.py plus dist-info (METADATA,
WHEEL, RECORD), an sdist a tar of the package directory. No index is
needed to build, so `pip install ./python` works offline. Version and
summary come from pyproject.toml ([project]); Python 3.11's tomllib reads
it, older ones a two-key line scan.
"""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _project():
    text = open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read()
    try:
        import tomllib
        return tomllib.loads(text)["project"]
    except ImportError:
        return {k: re.search(rf'^{k} = "([^"]*)"', text, re.M).group(1) for k in ("name", "version", "description")}


def _files():
    for name in sorted(os.listdir(os.path.join(ROOT, "corral"))):
        if name.endswith(".py"):
            yield f"corral/{name}"


def _metadata(project):
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    return (f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
            f"Summary: {project['description']}\nLicense: MIT\nRequires-Python: >=3.8\n"
            f"Description-Content-Type: text/markdown\n\n{readme}")


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = _project()
    dist = f"{project['name']}-{project['version']}"
    name = f"{dist}-py3-none-any.whl"
    entries = [(path, open(os.path.join(ROOT, path), "rb").read()) for path in _files()]
    entries.append((f"{dist}.dist-info/METADATA", _metadata(project).encode()))
    entries.append((f"{dist}.dist-info/WHEEL",
                    b"Wheel-Version: 1.0\nGenerator: corral_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"))
    record = [_record_line(p, d) for p, d in entries] + [f"{dist}.dist-info/RECORD,,"]
    entries.append((f"{dist}.dist-info/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as whl:
        for path, data in entries:
            whl.writestr(path, data)
    return name


def build_sdist(sdist_directory, config_settings=None):
    project = _project()
    dist = f"{project['name']}-{project['version']}"
    name = f"{dist}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        for path in ["pyproject.toml", "README.md", "build_backend/corral_build.py", *_files()]:
            tar.add(os.path.join(ROOT, path), arcname=f"{dist}/{path}")
        info = _metadata(project).encode()
        ti = tarfile.TarInfo(f"{dist}/PKG-INFO")
        ti.size = len(info)
        tar.addfile(ti, io.BytesIO(info))
    return name
