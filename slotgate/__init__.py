"""slotgate: the one import name of the distribution.

Its sub-packages are the repository's top-level folders (this folder links to them), so
the code reads as `proxy/`, `node/`, `protocol/` and `eventcore/` while an install
exposes only `slotgate.*` and cannot collide with other distributions' packages."""

# First of all: which build loads, compiled or pure Python (build.py).
from slotgate.build import BUILD as BUILD
