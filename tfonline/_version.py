"""tfonline's version and the TensorFlow versions it supports: one place, read by ``setup.py`` too.

Plain assignments only: ``setup.py`` executes this file without importing tfonline.
"""

__version__ = "0.2.0"

# The TensorFlow releases tfonline is tested with (README, "Install"). Older
# ones are refused; a newer one runs with a warning.
TENSORFLOW_MIN = "2.16"
TENSORFLOW_TESTED_MAX = "2.21"
TENSORFLOW_REQUIREMENT = ">=2.16,<2.22"
