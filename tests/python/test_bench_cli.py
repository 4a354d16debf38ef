"""prism bench, llama-bench style: `-p 0` measures generation only; a list entry that is not a count is a
one-line error."""
import json
import os

STORIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "stories260K",
                       "stories260K.bin")


def test_bench_generation_only_and_bad_lists(prism, tmp_path, monkeypatch):
    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path / "cache"))
    p = prism.run("bench", STORIES, "-p", "0,4", "-n", "8", "-t", "1", "-r", "1", "--json")
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    assert [r["test"] for r in rows] == ["pp4", "tg8"], p.stdout
    assert all(r["tokens_per_second"] > 0 and r["threads"] == 1 for r in rows)
    for bad, what in ((("-p", "12x"), "--n-prompt '12x'"), (("-t", "-1"), "--threads '-1'")):
        p = prism.run("bench", STORIES, *bad, "-n", "0", check=False)
        assert p.returncode != 0
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and what in lines[0] and "not a count" in lines[0], p.stderr
