"""The package under test is the checkout's (python/corral), over the
checkout's build tree ($CORRAL_BUILD, else build/): scripts/run-tests sets
CORRAL_BUILD. A sanitizer build's library cannot be loaded into Python
without its runtime: those tests skip."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import pytest  # noqa: E402


def sanitizer_build():
    import subprocess
    lib = os.path.join(os.environ.get("CORRAL_BUILD", os.path.join(HERE, "..", "..", "build")), "lib", "libcorral.so")
    dynamic = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True).stdout
    return "libasan" in dynamic or "libubsan" in dynamic


@pytest.fixture(scope="session", autouse=True)
def _no_sanitizer():
    if sanitizer_build():
        pytest.skip("a sanitizer build: its libcorral needs the ASan runtime preloaded into Python")
