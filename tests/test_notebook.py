"""analyses/quickstart.ipynb runs top to bottom (nbclient) on a kernel of this interpreter, and its
result objects render as HTML tables."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "analyses" / "quickstart.ipynb"
KERNEL = "glance-quickstart"


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """A kernelspec for *this* interpreter, first on JUPYTER_PATH, so the notebook runs in the venv that
    runs the tests (a fresh CI venv has ipykernel but may have no registered kernel, and a user-level
    'python3' kernel may point at another Python)."""
    spec = tmp_path / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "glance-law tests", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    return KERNEL


def test_committed_without_outputs_and_deterministic():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    for i, cell in enumerate(nb.cells):
        assert cell.get("id") == f"cell-{i:02d}"
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def test_quickstart_runs_top_to_bottom(kernel):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name=kernel, timeout=600,
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()          # raises CellExecutionError on the first failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    html = [o["data"]["text/html"] for o in outputs if o.output_type == "execute_result" and "text/html" in o.get("data", {})]
    # the law, its checks, the tail, the held-out tests and the width result render as HTML tables
    assert sum('<table class="glance-table">' in h for h in html) >= 5
    assert any("draftability law" in h for h in html)
    pngs = [o for o in outputs if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert len(pngs) >= 5       # decile curves, law fits, brackets, survival, width pareto
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "index.md" in text or "# Theory appendix" in text
