"""The testbed: real single, all-reduce and parameter-server training on this host.

Every worker and parameter server runs in its own Linux network namespace
with a ``tc``-limited NIC, so PS/Worker and AllReduce, and the 4x step from
a 25 to a 100 Gbit/s network, are measured rather than assumed. Entry
points: :func:`collect` (the run table), :func:`calibrate` (the host's
hardware catalogue entry) and the typer :data:`app`.
"""

from training.testbed.calibrate import calibrate
from training.testbed.cli import app, collect_command
from training.testbed.collect import collect
from training.testbed.netns import TestbedUnavailable

__all__ = ["app", "calibrate", "collect", "collect_command", "TestbedUnavailable"]
