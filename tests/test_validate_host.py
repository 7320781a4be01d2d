"""validate times and gates the host-core-contended window as diagnose's search does (`--host`).

diagnose's search decides on the worse of a quiet and a contended host core (H200 run 38:
per-block Llama 10.68 ms quiet, 15.48 with a busy loop on its core, whole 11.77 / 11.67); a plan
the search rejected for its contended step passed validate, which timed the quiet core only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rewriter.cli import main
from rewriter.engine.verdict import speed_failures

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "validate"


def test_the_contended_figures_are_gated_within_their_band():
    quiet = {"eager": 17.0, "plan": 10.68, "whole": 11.77}
    assert speed_failures(quiet, 0.95, None) == []
    busy = {"eager": 23.7, "plan": 15.48, "whole": 11.67}
    (fail,) = speed_failures(quiet, 0.95, None, busy, 0.087)
    assert fail.startswith("slower than the better baseline with the host core contended (whole compile, 11.670 ms)")
    assert "8.7% band" in fail and "< 0.874" in fail, fail
    # within the band: 0.95 / 1.087 = 0.874 allows whole 11.67 against a plan of up to 13.35 ms
    assert speed_failures(quiet, 0.95, None, dict(busy, plan=13.3), 0.087) == []
    # the band is at least the quiet rule's 2%
    (tight,) = speed_failures(quiet, 0.95, None, dict(busy, plan=12.6), 0.0)
    assert "2.0% band" in tight
    (slow,) = speed_failures(quiet, 0.0, None, {"eager": 10.0, "plan": 10.5}, 0.03)
    assert slow == "slower than eager with the host core contended: 10.500 ms vs 10.000 ms per step"
    assert speed_failures(quiet, 0.0, None, {"eager": 10.0, "plan": 10.25}, 0.03) == []


def _fake_measure(contended: dict[str, float] | None):
    from rewriter.engine.measure import Measurement

    def measure(spec, variants, opts, workdir, **kw):
        seen["contended"] = opts.contended
        m = Measurement()
        steps = {"eager": 17.0, "plan": 10.68, "whole": 11.77, "regional": 10.9}
        for v in variants:
            row = {"step_ms": steps[v.name], "numerics": "ok" if v.name != "eager" else "reference", "problems": [],
                   "compile": {}, "cold_first_call_s": 1.0, "compile_s_per_start": 1.0}
            if contended and v.name in contended:
                row["contended_step_ms"] = contended[v.name]
            m.results[v.name] = row
        m.timing = [{"shape": {"batch": 2, "seq": 16}, "timing": {
            v.name: {"n": 3, "median_ms": steps[v.name], "p10_ms": steps[v.name], "p90_ms": steps[v.name],
                     **({"contended_ms": contended[v.name]} if contended and v.name in contended else {})}
            for v in variants}}]
        return m

    seen: dict = {}
    return measure, seen


@pytest.mark.parametrize("host", ["both", "quiet"])
def test_validate_fails_a_plan_that_falls_behind_with_its_host_core_contended(tmp_path, capsys, monkeypatch, host):
    import rewriter.engine.measure as engine

    shutil.copytree(FIXTURES / "causal_bucket", tmp_path / "case")
    busy = {"eager": 23.7, "plan": 15.48, "whole": 11.67, "regional": 15.0}
    fake, seen = _fake_measure(busy if host == "both" else None)
    monkeypatch.setattr(engine, "measure", fake)
    out = tmp_path / "report"
    code = main(["validate", "--plan", str(tmp_path / "case" / "plan.yaml"), str(tmp_path / "case" / "src"),
                 "--out", str(out), "--speed-gate", "on", "--host", host])
    err = capsys.readouterr().err
    assert seen["contended"] is (host == "both")
    report = json.loads((out / "validation.json").read_text())
    md = (out / "validation.md").read_text()
    if host == "quiet":
        assert code == 0, err
        assert "host core contended" not in md and "contended_band" not in report
        return
    assert code == 1, err
    assert report["contended_band"] == 0.02  # one process per variant: no measured band, the floor
    [fail] = report["verdict"]["failures"]
    assert "with the host core contended (whole compile, 11.670 ms)" in fail
    assert "plan      10.680 ms/step (CPU) (15.480 with the host core contended)" in err, err
    assert "| step ms, host core contended |" in md and "| 15.480 |" in md
    assert "## Step time per shape, host core contended" in md and "| 23.700 | 15.480 | 11.670 | 15.000 |" in md
