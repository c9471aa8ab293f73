"""The wheel carries the Hydra configs: ``conf/`` is copied to ``dateline/conf`` at build time
(engine/inputs/paths.py ``conf_dir`` finds it there). Everything else is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithConf(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):     # an editable install reads the checkout's conf/
            return
        src = Path(__file__).resolve().parent / "conf"
        dst = Path(self.build_lib) / "dateline" / "conf"
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))


setup(cmdclass={"build_py": BuildPyWithConf})
