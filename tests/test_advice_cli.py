"""`python -m estimator advise` plumbing (contract §4): JSON shape, text output, errors as one line, exit 2.
The rules run on the fakes here (monkeypatched into the advisor); tests/test_advice_scenarios.py uses the real
estimator end to end."""

import json

import pytest

import estimator.advice.plan_rules
from estimator.cli import advise as advise_cli
from tests.conftest import fake_estimate, fake_make_plan


@pytest.fixture
def fakes(monkeypatch):
    real = estimator.advice.plan_rules.advise

    def advise(inputs, **kw):
        return real(inputs, make_plan=fake_make_plan, estimate_call=fake_estimate, **kw)

    monkeypatch.setattr(estimator.advice.plan_rules, "advise", advise)


def test_json_has_the_contract_keys_in_tree_order(fakes, capsys):
    code = advise_cli.main(["--preset", "llama-2-7b", "--seq-len", "4096", "--backend", "math", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == ["advice"]
    ids = [a["id"] for a in out["advice"]]
    assert ids[:3] == ["fits", "profile-first", "use-fused-kernel"]
    for item in out["advice"]:
        for key in ("id", "title", "why", "expected_effect"):
            assert isinstance(item[key], str) and item[key]
    fused = out["advice"][2]
    assert fused["change"] == {"backend": "auto"}
    assert isinstance(fused["bytes_before"], int) and fused["bytes_after"] < fused["bytes_before"]


def test_mask_flag_reaches_the_kernel_rules(fakes, capsys):
    assert advise_cli.main(["--preset", "llama-2-7b", "--seq-len", "4096", "--backend", "math", "--mask", "bool",
                            "--json"]) == 0
    ids = [a["id"] for a in json.loads(capsys.readouterr().out)["advice"]]
    assert "flash-ineligible-mask" in ids


def test_text_output_is_numbered(fakes, capsys):
    assert advise_cli.main(["--preset", "llama-2-7b", "--seq-len", "4096"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("1. [fits] ") and "   why:" in text and "   effect:" in text


@pytest.mark.parametrize("argv, flag", [
    (["--preset", "llama-2-7b", "--seq-len", "0"], "--seq-len"),
    (["--preset", "nope", "--seq-len", "10"], "--preset"),
    (["--preset", "llama-2-7b", "--seq-len", "4096", "--gpu", "z80"], "--gpu"),
    (["--preset", "llama-2-7b", "--seq-len", "4096", "--mask", "sometimes"], "--mask"),
    (["--preset", "llama-2-7b", "--seq-len", "4096", "--cached-len", "-3"], "--cached-len"),
    (["--preset", "llama-2-7b", "--seq-len", "4096", "--cached-len", "4096"], "--cached-len"),
])
def test_bad_input_is_one_line_naming_the_flag(fakes, capsys, argv, flag):
    assert advise_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and flag in err


def test_tree_flag_prints_the_decision_tree(capsys):
    assert advise_cli.main(["--tree"]) == 0
    out = capsys.readouterr().out
    assert "profile-first" in out and "└── " in out


def test_advising_loads_no_torch_streamlit_or_plotly():
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; from estimator.cli.advise import main; main(['--preset', 'llama-2-7b', '--seq-len', '2048', "
            "'--json']); print(sorted(m for m in ('torch', 'streamlit', 'plotly') if m in sys.modules), "
            "file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "[]"
    assert json.loads(done.stdout)["advice"][-1]["id"] == "log-backend"
