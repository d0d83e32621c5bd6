"""scripts/run_tests.sh's parallel lanes: together they select every test of one session, and the sessions share one
CI-scale study (tests/support/study.py, ``shared_once``) built once under a file lock."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from support.ci_inputs import skip_or_fail_in_ci

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "run_tests.sh"


def declared(array: str) -> dict[str, str]:
    """``{lane: value}`` of the quoted associative array ``array`` as ``run_tests.sh`` declares it."""
    block = re.search(rf"declare -A {array}=\((.*?)\)\n", SCRIPT.read_text(), re.S)
    assert block, f"run_tests.sh declares no {array}"
    return dict(re.findall(r'\[(\w+)\]="([^"]*)"', block.group(1)))


def lane_args() -> dict[str, list[str]]:
    """``{lane: its pytest path arguments}`` as ``run_tests.sh`` declares them."""
    return {name: args.split() for name, args in declared("lane_args").items()}


VERL_LANES = ("verl", "verl_dapo")


def test_lanes_cover_every_test_folder_once() -> None:
    lanes = lane_args()
    assert set(lanes) == {"dvc", "slurm", "workflow", "rest", *VERL_LANES}
    nice = re.search(r"declare -A lane_nice=\(([^)]*)\)", SCRIPT.read_text())
    assert nice and set(re.findall(r"\[(\w+)\]=\d+", nice.group(1))) == {*lanes, "vllm"}  # one each
    folder_lanes = {name: args for name, args in lanes.items() if name not in ("rest", *VERL_LANES)}
    folders = {a for args in folder_lanes.values() for a in args}
    # every folder but the rest lane's is in one lane only, and the rest lane is `tests` minus exactly those
    assert len(folders) == sum(len(args) for args in folder_lanes.values())
    assert lanes["rest"][0] == "tests"
    assert {a.removeprefix("--ignore=") for a in lanes["rest"][1:]} == folders
    assert all(a.startswith("--ignore=") for a in lanes["rest"][1:])
    assert all((REPO / f).is_dir() and any((REPO / f).glob("test_*.py")) for f in folders)
    lane_names = re.search(r"lane_names=\(([^)]*)\)", SCRIPT.read_text())
    assert lane_names and lane_names.group(1).split() == list(lanes)  # every declared lane is started


def test_verl_lanes_run_exactly_the_verl_loop_tests() -> None:
    """The verl lanes select `verl_loop` in the files that hold it (in the rest lane's folders, which deselect
    it), so verl's loop runs once, and no `verl_loop` test is left out."""
    text = SCRIPT.read_text()
    assert set(declared("lane_marks")) == set(VERL_LANES)
    assert re.search(r'^marks="not gpu and not vllm and not verl_loop"$', text, re.M)
    holders = sorted(
        str(f.relative_to(REPO))
        for f in (REPO / "tests").rglob("test_*.py")
        if re.search(r"pytest\.mark\.verl_loop", f.read_text(encoding="utf-8"))
    )
    assert sorted({a for lane in VERL_LANES for a in lane_args()[lane]}) == holders
    makefile = (REPO / "Makefile").read_text()
    make = re.search(r"^VERL_LOOP_TESTS = (.*)$", makefile, re.M)  # what make test-verl-loop runs
    assert make and sorted(make.group(1).split()) == holders


COLLECT = """
import json, sys
import pytest
sys.path.insert(0, "tests/verl_backend")

class Record:
    def pytest_collection_finish(self, session):
        import test_verl_cpu_loop as loop
        print("ITEMS", json.dumps({"ids": [i.nodeid for i in session.items],
                                   "runs": loop.selected_methods(session.items)}))

sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-m", sys.argv[1], *sys.argv[2:]],
                     plugins=[Record()]))
"""


def _collect(marks: str, files: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", COLLECT, marks, *files], cwd=REPO, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    line = [x for x in proc.stdout.splitlines() if x.startswith("ITEMS ")]
    assert proc.returncode == 0 and line, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(line[0].removeprefix("ITEMS "))


def test_the_verl_lanes_split_the_loop_by_family() -> None:
    """The two verl lanes' selections partition the `verl_loop` tests of one session, and each lane's tests read
    the runs of one family only, so each lane trains its half (GRPO, ACE-GRPO; DAPO, ACE-DAPO) and no run twice."""
    if importlib.util.find_spec("verl") is None:
        skip_or_fail_in_ci("verl is not installed (pip install -e .[verl])")
    args, marks = lane_args(), declared("lane_marks")
    whole = _collect("verl_loop", sorted({a for lane in VERL_LANES for a in args[lane]}))
    lanes = {lane: _collect(marks[lane], args[lane]) for lane in VERL_LANES}
    ids = [i for lane in VERL_LANES for i in lanes[lane]["ids"]]
    assert sorted(ids) == sorted(whole["ids"]) and len(ids) == len(set(ids))
    assert whole["runs"] == ["grpo", "dapo", "ace_grpo", "ace_dapo"]
    assert lanes["verl"]["runs"] == ["grpo", "ace_grpo"]
    assert lanes["verl_dapo"]["runs"] == ["dapo", "ace_dapo"]
    assert any("nsr" in i for i in lanes["verl"]["ids"])


def test_verl_lane_fails_in_ci_without_verl() -> None:
    """Under CI=true a missing verl (hidden from ``find_spec``) is a collection error (exit 2), never a skip: the
    loop's module raises. Outside CI the same lane skips and names the install command."""
    code = (
        "import importlib.util, sys\n"
        "real = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda name, *a: None if name in ('verl', 'transfer_queue') else real(name, *a)\n"
        "import pytest\n"
        f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-m', 'verl_loop', {lane_args()['verl'][0]!r}]))\n"
    )
    env = {**os.environ, "CI": "true"}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "verl 0.9.1 and TransferQueue must be installed in CI" in proc.stdout
    env["CI"] = "false"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    # outside CI: a skip that names the fix; nothing else collected (exit 5, which run_tests.sh reads as that skip)
    assert proc.returncode == 5, proc.stdout[-3000:]
    assert "verl / TransferQueue not installed (pip install -e .[verl])" in proc.stdout


def _build_in(proc_dir: Path, shared: Path, name: str) -> subprocess.Popen[str]:
    """A process that asks ``shared_once(name)`` for a folder whose build takes a second and counts its builds."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        sys.path.insert(0, {str(REPO / "tests")!r})
        from support.study import shared_once

        def build(dest: Path) -> Path:
            dest.mkdir()
            with open({str(proc_dir / "builds")!r}, "a") as f:
                f.write("x")
            time.sleep(1.0)
            (dest / "made").write_text("ok")
            return dest

        print(shared_once({name!r}, build, None))
        """
    )
    env = {**os.environ, "ACERL_TEST_SHARED_DIR": str(shared)}
    return subprocess.Popen([sys.executable, "-c", code], env=env, text=True, stdout=subprocess.PIPE)


def test_shared_once_builds_once_for_concurrent_sessions(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    procs = [_build_in(tmp_path, shared, "study") for _ in range(3)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert (tmp_path / "builds").read_text() == "x"  # one build for three sessions
    assert outs == [str(shared / "study")] * 3
    assert (shared / "study" / "made").read_text() == "ok"


def test_shared_once_does_not_retry_a_failed_build(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "study.failed").write_text("failed\n")
    proc = _build_in(tmp_path, shared, "study")
    proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert not (tmp_path / "builds").exists()


def test_shared_once_rebuilds_what_a_killed_session_left(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    (shared / "study").mkdir(parents=True)  # half made, no marker: its builder died
    (shared / "study" / "partial").write_text("")
    proc = _build_in(tmp_path, shared, "study")
    assert proc.communicate(timeout=120)[0].strip() == str(shared / "study")
    assert proc.returncode == 0
    assert sorted(p.name for p in (shared / "study").iterdir()) == ["made"]


def test_a_bad_lane_mode_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    env = {**os.environ, "ACERL_TEST_LANES": "fast", "ACERL_TEST_SLURM": "0", "PYTHON": sys.executable}
    proc = subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "run_tests: ACERL_TEST_LANES must be parallel or serial, not 'fast'"
