"""The one compiled module, engine.kernels._native (engine/kernels/_native*.c: the
numpy path's compiled kernels, each run without the GIL; the files say why).
Everything else is in pyproject.toml.

``optional=True``: on a machine without a C compiler the build goes on without it,
and every kernel runs its numpy path instead (slower, same results).
"""

import platform

from setuptools import Extension, setup


def _libmvec() -> list[str]:
    """glibc's vector maths (the C file's vector tanhf): x86-64 glibc >= 2.35."""
    libc, version = platform.libc_ver()
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    return ["mvec"] if libc == "glibc" and platform.machine() == "x86_64" and parts >= (2, 35) else []


setup(ext_modules=[
    Extension("engine.kernels._native",
              ["engine/kernels/_native.c", "engine/kernels/_native_util.c",
               "engine/kernels/_native_conv.c", "engine/kernels/_native_rnn.c",
               "engine/kernels/_native_winograd.c"],
              depends=["engine/kernels/_native.h", "engine/kernels/_native_rnn.h"],
              extra_compile_args=["-O3", "-fno-math-errno", "-fopenmp-simd", "-pthread"],
              extra_link_args=["-pthread"],
              libraries=["m", *_libmvec()], optional=True),
])
