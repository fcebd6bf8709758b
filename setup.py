"""Builds the optional C validator ``collector.server._wirecheck``; everything else is in pyproject.toml.

Optional: without a compiler the install still succeeds and :mod:`collector.server.validate`
validates in Python (``validate.FAST_PATH`` is False).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("collector.server._wirecheck", sources=["collector/server/_wirecheck.c"], optional=True)])
