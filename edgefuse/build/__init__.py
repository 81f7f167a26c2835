"""``edgefuse build``: one spec in, everything a board needs out, the same bytes every time.

Why a package of its own: the build drives every stage below it (convert, optimize, quantize,
compile, the runtime for the golden recording, the apps' configs) and adds what none of them
knows about: the spec and its schema (``spec``), a content-addressed cache (``cache``), the
per-model pipeline (``stages``), the bundle layout with its manifest and deterministic archive
(``bundle``), the board-side checks (``bundle_check``) and the shell templates (``templates/``).
"""
