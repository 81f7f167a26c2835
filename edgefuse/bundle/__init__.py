"""The device bundle behind ``edgefuse build``: one spec in, all a board needs out, same bytes.

Why a package of its own, named for what it makes (the CLI verb stays ``build``; a folder named
``build/`` reads as a build artefact and is skipped by common tooling): the build drives every stage
below it (convert, optimize, quantize, compile, the runtime for the golden recording, the apps'
configs) and adds what none of them knows about: the spec and its schema (``spec``), a
content-addressed cache (``cache``), the per-model pipeline (``stages``), the bundle layout with its
manifest and deterministic archive (``archive``), the board-side checks (``bundle_check``) and the
shell templates (``templates/``).
"""
