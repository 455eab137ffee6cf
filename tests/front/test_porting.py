"""The acceptance test of docs/porting.md: its torch training script runs on threadgrad with
`import torch` -> `import threadgrad as tg` and `torch` -> `tg`, and gives torch's numbers."""
from __future__ import annotations

import contextlib
import io
import pathlib
import re

import numpy as np
import pytest

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "porting.md"


def _block(marker: str) -> str:
    m = re.search(rf"<!-- porting: {marker} -->\n```(?:py|python)\n(.*?)```", PAGE.read_text(), re.S)
    assert m, f"docs/porting.md has no block marked {marker}"
    return m.group(1)


def port(torch_script: str) -> str:
    """The whole port: the import line, then every other ``torch`` -> ``tg``."""
    return torch_script.replace("import torch\n", "import threadgrad as tg\n", 1).replace("torch", "tg")


def _run(script: str) -> tuple[dict, str]:
    namespace: dict = {"__name__": "__main__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(script, str(PAGE), "exec"), namespace)  # noqa: S102 - our docs
    return namespace, out.getvalue()


def test_the_threadgrad_script_is_the_torch_script_ported():
    torch_script = _block("torch")
    assert "import torch\n" in torch_script and "tg" not in torch_script
    assert _block("threadgrad") == port(torch_script)


@pytest.mark.timeout(300)
def test_the_ported_script_gives_torchs_numbers():
    torch = pytest.importorskip("torch")
    theirs, their_out = _run(_block("torch"))
    ours, our_out = _run(port(_block("torch")))
    assert our_out == their_out  # the printed losses and accuracy, to 3 digits
    assert len(ours["losses"]) == len(theirs["losses"]) == 200
    np.testing.assert_allclose(ours["losses"][:20], theirs["losses"][:20], rtol=1e-5)  # rounding only
    np.testing.assert_allclose(ours["losses"], theirs["losses"], rtol=3e-3, atol=5e-5)  # grown over 200 steps
    assert ours["losses"][-1] < 0.05 * ours["losses"][0]
    for p, q in zip(ours["params"], theirs["params"]):
        assert p.is_leaf and p.requires_grad and p.dtype == np.float32
        # Rounding differences of 1 ulp at step 1 grow through 200 Adam steps (to 3e-5 at step
        # 150, measured; Adam divides by the root of tiny second moments near dead units).
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-2, atol=1e-2)
    ts, os_ = theirs["opt"].state_dict(), ours["opt"].state_dict()
    assert os_["param_groups"] == ts["param_groups"]
    for k, st in ts["state"].items():
        assert os_["state"][k]["step"].item() == st["step"].item() == 200.0
        assert sorted(os_["state"][k]) == sorted(st)  # (values: test_optim.py, on equal gradients)
        for key in ("exp_avg", "exp_avg_sq"):
            assert os_["state"][k][key].shape == tuple(st[key].shape) and os_["state"][k][key].dtype == np.float32
    assert isinstance(ours["checkpoint"]["params"][0], ours["tg"].Tensor)
    assert isinstance(theirs["checkpoint"]["params"][0], torch.Tensor)
