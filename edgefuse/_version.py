"""edgefuse's version, in a module of its own.

Why a leaf: stages that stamp their outputs (the BUILD_DIR manifest, compile.sh, doctor) need the
version, and importing it from ``edgefuse/__init__.py`` would import every stage first.
"""

__version__ = "0.1.0"
