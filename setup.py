"""pyproject.toml holds the metadata; this adds what it cannot say: a .pth file at the top of
site-packages (pyspark_mqfs/mqfs-pyspark-python.pth), which makes this environment's python
the default for Spark's Python workers, so a plain SparkSession finds format "mqfs"; and the
put path's C modules (EXTENSIONS), optional: without a compiler or the -dev packages the
install still succeeds and the store runs its Python codec (it says so once)."""

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

PTH = "mqfs-pyspark-python.pth"


class BuildWithPth(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(os.path.join("pyspark_mqfs", PTH), os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


class OptionalExtensions(build_ext):
    """An optional module that failed to build (no compiler, no -dev package) leaves no file:
    it is left out of the outputs too, or the editable install would fail to link it and a
    machine without a compiler could not install at all."""

    def get_outputs(self) -> list[str]:
        if self.inplace:
            return list(self.get_output_mapping())
        return [p for p in super().get_outputs() if os.path.exists(p)]

    def get_output_mapping(self) -> dict[str, str]:
        return {built: placed for built, placed in super().get_output_mapping().items() if os.path.exists(placed)}


# One entry per C module, each linked against system libraries (scripts/setup installs their
# -dev packages), never against copies of their sources.
EXTENSIONS = [
    # CommitLog records: encode, stamp, seal, PutResults (store/format/compiled.py loads it)
    Extension("mqfs.store.format._records", ["store/format/_records.c"], libraries=["xxhash", "z"],
              depends=["store/files/_index_entry.h"],
              extra_compile_args=["-O2", "-Wall"], optional=True),
    # IndexFile entries and bucket heads of a put and a batch (store/format/compiled.py too)
    Extension("mqfs.store.files._dispatch", ["store/files/_dispatch.c"], libraries=["xxhash"],
              depends=["store/files/_index_entry.h"],
              extra_compile_args=["-O2", "-Wall"], optional=True),
    # JSON lines of the commonest shapes (store/format/jsonl.py's decode_lines loads it)
    Extension("mqfs.store.format._jsonl", ["store/format/_jsonl.c"],
              extra_compile_args=["-O2", "-Wall"], optional=True),
    # mqfs dump's common record decoded, checked and printed (store/offline/dump_lines.py)
    Extension("mqfs.store.offline._dump", ["store/offline/_dump.c"], libraries=["xxhash", "z"],
              extra_compile_args=["-O2", "-Wall"], optional=True),
]

setup(cmdclass={"build_py": BuildWithPth, "build_ext": OptionalExtensions}, ext_modules=EXTENSIONS)
