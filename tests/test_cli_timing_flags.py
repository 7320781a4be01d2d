"""`--pin` and `--no-overlap` reach the measurement engine's options: the search's (diagnose) and
validate's. The search's note on an overlapped reference names `--no-overlap`, which diagnose
lacked until now; `Options.pin` had no flag at all."""

from __future__ import annotations

import pytest

from rewriter.cli import main


def _captured(monkeypatch, target: str) -> dict:
    seen: dict = {}

    def fake(*args, **kwargs):
        seen.update(kwargs, args=args)
        return 0

    monkeypatch.setattr(target, fake)
    return seen


def test_diagnose_passes_pin_and_no_overlap_to_the_search(tmp_path, monkeypatch):
    seen = _captured(monkeypatch, "rewriter.diagnose.runner.diagnose_command")
    argv = ["diagnose", "--harness", "harness.py", str(tmp_path), "--pin", "off", "--no-overlap"]
    assert main(argv) == 0
    assert seen["pin"] == "off" and seen["no_overlap"] is True
    seen.clear()
    assert main(["diagnose", "--harness", "harness.py", str(tmp_path)]) == 0
    assert seen["pin"] == "shared" and seen["no_overlap"] is False  # the defaults, as the engine's


def test_the_search_options_carry_the_contexts_pin_and_overlap(tmp_path):
    from rewriter.diagnose.context import Context
    from rewriter.diagnose.search import engine_options as _options

    session = type("S", (), {"cuda": False})()
    opts = _options(Context(session=session, out_dir=tmp_path, backend="eager", pin="own", overlap=False), 60.0)
    assert opts.pin == "own" and opts.overlap is False
    default = _options(Context(session=session, out_dir=tmp_path, backend="eager"), 60.0)
    assert default.pin == "shared" and default.overlap is True


def test_cold_parallel_reaches_the_engine_and_defaults_to_the_hosts_rule(tmp_path, monkeypatch):
    """--cold-parallel N sets how many candidates' cold phases run at a time (H200 runs 29-31: two
    at a time took 87-110 s of a 134-165 s search); unset, the engine's rule stands (2 on a GPU
    host with >= 8 CPUs, else 1); 0 is a usage error."""
    from rewriter.diagnose.context import Context
    from rewriter.diagnose.search import engine_options as _options

    seen = _captured(monkeypatch, "rewriter.diagnose.runner.diagnose_command")
    assert main(["diagnose", "--harness", "harness.py", str(tmp_path), "--cold-parallel", "3"]) == 0
    assert seen["cold_parallel"] == 3
    seen.clear()
    assert main(["diagnose", "--harness", "harness.py", str(tmp_path)]) == 0 and seen["cold_parallel"] is None
    assert main(["diagnose", "--harness", "harness.py", str(tmp_path), "--cold-parallel", "0"]) == 2
    session = type("S", (), {"cuda": False})()
    assert _options(Context(session=session, out_dir=tmp_path, backend="eager", cold_parallel=3), 60.0).parallel_cold == 3
    assert _options(Context(session=session, out_dir=tmp_path, backend="eager"), 60.0).parallel_cold == 1  # CPU


def test_validate_passes_pin_to_the_engine(tmp_path, monkeypatch):
    seen = _captured(monkeypatch, "rewriter.validate.command.validate_command")
    assert main(["validate", "--plan", str(tmp_path / "plan.yaml"), str(tmp_path), "--pin", "own"]) == 0
    assert seen["args"][2].pin == "own" and seen["args"][2].overlap is True


@pytest.mark.parametrize("command", ["diagnose", "validate"])
def test_an_unknown_pin_mode_is_a_usage_error_naming_the_choices(tmp_path, capsys, command):
    flag = "--plan" if command == "validate" else "--harness"
    assert main([command, flag, str(tmp_path / "plan.yaml"), str(tmp_path), "--pin", "fastst"]) == 2
    err = capsys.readouterr().err
    assert "--pin" in err and "shared" in err and "own" in err and "fastest" in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["none", "", "None"])
def test_baselines_none_or_empty_means_no_baselines(tmp_path, monkeypatch, value):
    """A newcomer's `--baselines none` was refused ("unknown none"); only an empty string worked."""
    seen = _captured(monkeypatch, "rewriter.validate.command.validate_command")
    assert main(["validate", "--plan", str(tmp_path / "plan.yaml"), str(tmp_path), "--baselines", value]) == 0
    assert seen["args"][2].variants == ("eager", "plan")


def test_an_unknown_baseline_is_still_a_usage_error(tmp_path, capsys):
    assert main(["validate", "--plan", str(tmp_path / "plan.yaml"), str(tmp_path), "--baselines", "whole,regoinal"]) == 2
    assert "--baselines: unknown regoinal; expected whole, regional" in capsys.readouterr().err


def test_host_quiet_turns_the_contended_core_timing_off(tmp_path, monkeypatch):
    """--host both (the default) times every candidate also with a busy loop on the shared core
    and decides on both conditions (on CUDA); --host quiet decides on the quiet core alone, as a
    dedicated host runs; on CPU neither is timed."""
    from rewriter.diagnose.context import Context
    from rewriter.diagnose.runner import diagnose_command  # the real one, before it is stubbed for the CLI
    from rewriter.diagnose.search import engine_options as _options

    seen = _captured(monkeypatch, "rewriter.diagnose.runner.diagnose_command")
    assert main(["diagnose", "--harness", "harness.py", str(tmp_path), "--host", "quiet"]) == 0 and seen["host"] == "quiet"
    seen.clear()
    assert main(["diagnose", "--harness", "harness.py", str(tmp_path)]) == 0 and seen["host"] == "both"
    assert main(["diagnose", "--harness", "harness.py", str(tmp_path), "--host", "busy"]) == 2
    seen.clear()
    forwarded: dict = {}

    monkeypatch.setattr("rewriter.diagnose.runner.harness_from_flags", lambda *a, **k: (None, None))
    monkeypatch.setattr("rewriter.diagnose.runner.check_output", lambda *a: None)
    forwarded["stopped"] = False
    for host, contended in (("quiet", False), ("both", True)):
        forwarded.pop("contended", None)
        monkeypatch.setattr("rewriter.diagnose.runner.diagnose", lambda *a, **k: (forwarded.update(k), type("O", (), {"stopped": False})())[1])
        diagnose_command("harness.py", str(tmp_path), str(tmp_path / "plan.yaml"), model=None, inputs=None, shapes=(), mode=None,
                         dtype=None, device=None, report_dir=None, backend=None, runs=None, restarts=None, timeout=1.0, steps=1,
                         host=host)
        assert forwarded["contended"] is contended
    cuda = type("S", (), {"cuda": True})()
    assert _options(Context(session=cuda, out_dir=tmp_path, backend="inductor"), 60.0).contended is True
    searched = _options(Context(session=cuda, out_dir=tmp_path, backend="inductor"), 60.0)
    # the search's CUDA timing is validate's (engine.options.on_device): two processes, two windows
    assert (searched.replicates, searched.windows, searched.replica_caches) == (2, 2, "reautotune")
    assert _options(Context(session=cuda, out_dir=tmp_path, backend="inductor", contended=False), 60.0).contended is False
    cpu = type("S", (), {"cuda": False})()
    assert _options(Context(session=cpu, out_dir=tmp_path, backend="eager"), 60.0).contended is False
