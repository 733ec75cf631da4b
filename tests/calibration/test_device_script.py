"""The prepared device run must leave its measurements where it copies them from: every
`calibrate` call in scripts/device_calibration.sh names the tree's hardware_profiles/
(calibrate's default is the user data folder, which the copy to $OUT would miss)."""

import re
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "scripts" / "device_calibration.sh"


def test_script_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_every_calibrate_call_writes_into_the_copied_folder() -> None:
    text = SCRIPT.read_text()
    calls = [line for line in text.splitlines()
             if re.search(r"(^|\s)calibrate (measure|fit|report|run)\b", line)]  # fmt: skip
    assert len(calls) >= 4
    directory = re.search(r"^DIR=(\S+)", text, re.M)
    assert directory is not None
    assert directory.group(1) == "hardware_profiles"
    for line in calls:
        assert '--profiles-dir "$DIR"' in line, line
    assert 'cp -r "hardware_profiles/$NAME"' in text
