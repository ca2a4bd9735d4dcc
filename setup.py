"""pyproject.toml holds the metadata; this adds what it cannot say: a .pth file at the top of
site-packages (pyspark_mqfs/mqfs-pyspark-python.pth), which makes this environment's python
the default for Spark's Python workers, so a plain SparkSession finds format "mqfs"."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "mqfs-pyspark-python.pth"


class BuildWithPth(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(os.path.join("pyspark_mqfs", PTH), os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": BuildWithPth})
