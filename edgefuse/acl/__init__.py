"""Everything Ascend: building for ATC, the board backend, and edgefuse's custom operators.

- ``build/``: what the compile stage needs (soc table, op-support table, precision files, AIPP,
  the ATC preparation of the ONNX, and ``compile`` itself);
- ``atc/``: the ATC command line (options), running it (runner) and reading its error codes;
- ``session.py``, ``resources.py``, ``return_codes.py``: the board backend over pyACL;
- ``ops/``: the custom operators, declared once (schema, numpy reference, ONNX decomposition,
  TBE kernel) and used by optimize, the host backends and the op-package build.
"""
