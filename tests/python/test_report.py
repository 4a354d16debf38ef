"""prism compile then prism report on the shipped stories260K: the receipts page a person reads."""
import json
import os
import re

STORIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "stories260K",
                       "stories260K.bin")


def test_report_page(prism, tmp_path, monkeypatch):
    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path / "cache"))
    art = tmp_path / "stories.prism"
    prism.run("compile", STORIES, "-o", art, "--search-budget", "20", "--ctx", "64", "--threads", "2")
    receipts = json.loads((art / "receipts.json").read_text())
    ops = {r.get("op", "") for r in receipts if r.get("scope", "kernel") == "kernel"}
    # Kernels are named by the model op they come from.
    for op in ("layer 0 q_proj", "layer 4 down_proj", "layer 2 attention", "lm_head"):
        assert any(o == op or o.startswith(op) for o in ops), (op, sorted(ops)[:20])
    p = prism.run("report", art)
    assert "model op" in p.stdout and "layer 0" in p.stdout, p.stdout[:2000]
    html = (art / "report.html").read_text()
    # A summary per bucket, then a roofline with labelled log axes and one ceiling per instruction kind.
    assert "<h2>decode</h2>" in html and "<h2>prefill</h2>" in html
    assert "By kind of work" in html and "By layer" in html
    assert "arithmetic intensity (flop per byte moved)" in html and "GFLOP/s reached" in html
    bases = {r["peak_basis"] for r in receipts if r.get("peak_gflops", 0) > 0}
    assert bases, "receipts carry the instruction kind of their ceiling"
    for basis in bases:
        assert f"class='rooflabel'>{basis} " in html, basis
    points = re.findall(r"<circle [^>]*><title>([^<]*)</title>", html)
    assert len(points) > 20, len(points)
    assert all(" GFLOP/s, " in t and "% of its roof" in t for t in points)
    # Candidates read as times, not "11.908000us err 0.000000".
    assert "us err" not in html and "µs" in html
