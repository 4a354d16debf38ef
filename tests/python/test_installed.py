# The package as `pip install .` leaves it (scripts/test.sh installs it into a fresh virtual environment
# and runs this file with PRISM_INSTALLED=1): the prism command, the package outside the source tree with
# the shipped model inside it, and torch.compile finding backend="prism" through the entry point.
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(os.environ.get("PRISM_INSTALLED") != "1",
                                reason="runs against an installed package (scripts/test.sh sets PRISM_INSTALLED=1)")


def test_the_package_is_the_installed_one():
    import prism

    assert "site-packages" in prism.__file__
    assert "site-packages" in prism.default_model()
    m = prism.load(threads=2)
    assert m.complete("Once upon a time", max_tokens=12, temperature=0).startswith(", there was a little girl")


def test_the_prism_command_is_installed():
    exe = shutil.which("prism", path=os.path.dirname(sys.executable))
    assert exe, "pip install . puts prism beside the interpreter"
    import prism

    out = subprocess.run([exe, "run", prism.default_model(), "-n", "8", "--temp", "0"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "Once upon a time" in out.stdout or "there was" in out.stdout


def test_torch_compile_finds_the_backend_by_name():
    torch = pytest.importorskip("torch")
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    torch._dynamo.reset()
    c = torch.compile(m, backend="prism", dynamic=True)
    with torch.no_grad():
        for n in (2, 5):
            x = torch.randn(n, 8)
            assert (c(x) - m(x)).abs().max().item() < 1e-5
