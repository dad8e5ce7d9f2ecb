"""``python -m training.testbed collect|calibrate``."""

from training.testbed.cli import app

app(prog_name="python -m training.testbed")
