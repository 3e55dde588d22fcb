"""Only what pyproject.toml cannot say: the root's evaluator.py is installed as the module hase.evaluator
(hase/evaluator.py in the wheel), so that nothing but `hase` sits at the top level of site-packages. In a checkout
(and `pip install -e .`) hase/__init__.py finds it at the root."""
import os

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    def run(self):
        super().run()
        if not getattr(self, "editable_mode", False):
            self.copy_file("evaluator.py", os.path.join(self.build_lib, "hase", "evaluator.py"))

    def get_outputs(self, include_bytecode=1):
        out = super().get_outputs(include_bytecode)
        if not getattr(self, "editable_mode", False):
            out.append(os.path.join(self.build_lib, "hase", "evaluator.py"))
        return out


setup(cmdclass={"build_py": BuildPy})
