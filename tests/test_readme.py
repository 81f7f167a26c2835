"""README.md's commands are what users and CI run: keep them and .ci/run in step."""

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    lines = (ROOT / "README.md").read_text().splitlines()
    return [line.strip() for line in lines[:20] if line.startswith("    ")]


def test_readme_opens_with_demo_and_test_commands():
    demo, tests = _readme_commands()[:2]
    assert demo.endswith("edgefuse demo")
    assert tests.endswith("python -m pytest tests")
    assert "pip install torch==2.13.0" in demo and "pip install torch==2.13.0" in tests
    assert "'.[torch,vision]'" in demo  # the demo exports with torch and reads the clip with cv2


def test_ci_runs_the_readme_test_command():
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _readme_commands()[1] in [line.strip() for line in ci_lines]


def test_the_pipeline_makes_the_folders_its_commands_write_into():
    """The verbs write into existing folders only (exit 2 otherwise), so the README's pipeline,
    pasted as it stands, must make its work folder before the first `-o w/...`."""
    text = (ROOT / "README.md").read_text()
    block = text[text.index("## The pipeline"):].split("\n\n")[1]
    made = {Path(".")}
    for line in block.splitlines():
        words = line.split("#")[0].split()
        if words[:2] == ["mkdir", "-p"]:
            made.update(Path(word) for word in words[2:])
        for flag, value in zip(words, words[1:], strict=False):
            if flag in ("-o", "--output", "--report", "--json"):
                assert Path(value.rstrip("/")).parent in made, (line, value)
