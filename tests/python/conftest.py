# Shared fixtures of the Python parity tests: the prism binary, the model zoo built once per
# session, and a summary table of the measured errors printed at the end of the run.
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_REPORT = []  # (test, what, value) rows for the terminal summary

# Exit status of a run that could only skip because torch/transformers/gguf are missing;
# tests/CMakeLists.txt declares it as the SKIP_RETURN_CODE, so ctest reports "Skipped".
SKIP_EXIT_CODE = 77


def _missing_modules():
    import importlib.util
    return [m for m in ("torch", "transformers", "gguf") if importlib.util.find_spec(m) is None]


def pytest_sessionfinish(session, exitstatus):
    missing = _missing_modules()
    if missing and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        print(f"\nparity tests skipped: {', '.join(missing)} not installed (pip install torch transformers gguf)")
        session.exitstatus = SKIP_EXIT_CODE


def report(test, what, value):
    _REPORT.append((test, what, value))


def pytest_terminal_summary(terminalreporter):
    if not _REPORT:
        return
    terminalreporter.section("parity measurements")
    for test, what, value in _REPORT:
        terminalreporter.write_line(f"{test:<34} {what:<44} {value}")


@pytest.fixture(scope="session")
def prism_py():
    """The prism Python package: the installed one, else build/python (PRISM_PYTHON names another)."""
    path = os.environ.get("PRISM_PYTHON") or os.path.join(os.path.dirname(__file__), "..", "..", "build", "python")
    if os.path.isdir(os.path.join(path, "prism")):
        sys.path.insert(0, os.path.abspath(path))
    try:
        import prism
    except ImportError as e:
        pytest.skip(f"the prism Python package is not built ({e}): pip install nanobind, then build")
    return prism


@pytest.fixture(scope="session")
def prism_bin():
    path = os.environ.get("PRISM_BIN") or os.path.join(os.path.dirname(__file__), "..", "..", "build", "prism")
    if not os.path.isfile(path):
        pytest.skip(f"prism binary not found at {path} (build it, or set PRISM_BIN)")
    return os.path.abspath(path)


class Prism:
    def __init__(self, binary):
        self.binary = binary

    def run(self, *args, check=True, timeout=600):
        env = dict(os.environ)
        env.setdefault("PRISM_THREADS", "2")
        p = subprocess.run([self.binary, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)
        if check and p.returncode != 0:
            pytest.fail(f"prism {' '.join(map(str, args))} exited {p.returncode}:\n{p.stderr}")
        return p


@pytest.fixture(scope="session")
def prism(prism_bin):
    return Prism(prism_bin)


class Zoo:
    """Builds each family's model (HF folder, GGUF) the first time a test asks for it."""

    def __init__(self, root):
        self.root = root
        self.built = {}
        self.cache = {}  # per-family memo for tests (reference logits and the like)

    def get(self, name):
        if name not in self.built:
            import make_models
            self.built[name] = make_models.build_family(name, os.path.join(self.root, name))
        return self.built[name]


@pytest.fixture(scope="session")
def zoo(tmp_path_factory):
    return Zoo(str(tmp_path_factory.mktemp("models")))
