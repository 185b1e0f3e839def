"""Shared by the contract tests: the checkout, the built CLI, the schemas.
(Not named conftest.py: python/tests has one, and both suites may be
collected in one pytest run.)"""
import json
import os
import subprocess

import pytest

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("CORRAL_BUILD", os.path.join(ROOT, "build"))
CLI = os.path.join(BUILD, "bin", "corral")


def schema(name):
    with open(os.path.join(ROOT, "schema", name)) as f:
        return json.load(f)


def corral(*args, input=None, check=False, env=None):
    return subprocess.run([CLI, *args], input=input, capture_output=True, text=True, check=check,
                          env=env, timeout=120)


@pytest.fixture(scope="session")
def cli():
    if not os.access(CLI, os.X_OK):
        pytest.fail(f"{CLI} not built (make)")
    return CLI
