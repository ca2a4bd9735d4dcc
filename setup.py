"""pyproject.toml holds the metadata; this adds what it cannot say: a .pth file at the top of
site-packages (pyspark_mqfs/mqfs-pyspark-python.pth), which makes this environment's python
the default for Spark's Python workers, so a plain SparkSession finds format "mqfs"; and the
put path's C modules (EXTENSIONS), optional: without a compiler or the -dev packages the
install still succeeds and the store runs its Python codec (it says so once)."""

import os

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

PTH = "mqfs-pyspark-python.pth"


class BuildWithPth(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(os.path.join("pyspark_mqfs", PTH), os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


# One entry per C module, each linked against system libraries (scripts/setup installs their
# -dev packages), never against copies of their sources.
EXTENSIONS = [
    # CommitLog records: encode, stamp, seal, PutResults (store/format/compiled.py loads it)
    Extension("mqfs.store.format._records", ["store/format/_records.c"], libraries=["xxhash", "z"],
              extra_compile_args=["-O2", "-Wall"], optional=True),
    # IndexFile entries and bucket heads of a put and a batch (store/format/compiled.py too)
    Extension("mqfs.store.files._dispatch", ["store/files/_dispatch.c"], libraries=["xxhash"],
              extra_compile_args=["-O2", "-Wall"], optional=True),
]

setup(cmdclass={"build_py": BuildWithPth}, ext_modules=EXTENSIONS)
