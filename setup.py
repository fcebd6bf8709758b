"""Builds the optional C extensions; everything else is in pyproject.toml.

All five are optional: without a compiler the install still succeeds and the Python paths run.
``collector.wirecheck._wirecheck`` validates batches (else :mod:`collector.wirecheck.validate` validates
in Python: ``validate.FAST_PATH`` is False); ``collector.store._rowbuild`` builds index rows (else
:func:`collector.store.indexer.batched_rows` builds them in Python: ``rowbuild.FAST_PATH`` is False);
``collector.store._cells`` makes the embedded store's SQLite parameters (else ``local._py_cells`` does);
``collector.store._readback`` decodes the rollup read-back's events (else :mod:`collector.store.readback`
does it in Python: ``readback.FAST_PATH`` is False); ``collector.store._sqlput`` runs the embedded store's puts
and multi-row reads with the GIL released (it also needs sqlite3.h; else Python's ``executemany`` and
``IN`` lookups do: ``local.SQLPUT`` is False).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("collector.wirecheck._wirecheck", sources=["collector/wirecheck/_wirecheck.c"], optional=True),
    Extension("collector.store._rowbuild", sources=["collector/store/_rowbuild.c"],
              depends=["collector/store/_blake2b.h"], optional=True),
    Extension("collector.store._cells", sources=["collector/store/_cells.c"], optional=True),
    Extension("collector.store._readback", sources=["collector/store/_readback.c"],
              depends=["collector/store/_blake2b.h", "collector/store/_partof.h"], optional=True),
    Extension("collector.store._sqlput", sources=["collector/store/_sqlput.c"], libraries=["sqlite3"], optional=True),
])
