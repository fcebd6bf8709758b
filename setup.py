"""Builds the optional C validator ``tracehook._wirecheck``; everything else is in pyproject.toml.

Optional: without a compiler the install still succeeds and :mod:`tracehook.wire`
validates in Python (``wire.FAST_PATH`` is False).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tracehook._wirecheck", sources=["tracehook/_wirecheck.c"], optional=True)])
