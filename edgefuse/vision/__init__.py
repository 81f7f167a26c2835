"""edgefuse.vision: what camera and video apps share, for edgefuse's apps and users' programs.

Each piece lives in the module named for its job; this package imports none of them, so that the
image arithmetic (``preprocess``, ``nms``, ``detect``, ``segment``, ``palette``, ``draw``) stays
usable by the stages below the runtime (calibration on images reads ``preprocess``) without
pulling in sessions and threads:

- scenes to train and test on: ``scenes.SceneGenerator`` (procedural shapes with boxes and masks);
- frames in: ``sources.open_source`` (camera, file, URL, folder, iterable; live sources keep the
  newest frame, files lose none), ``preprocess.Preprocess`` and the letterbox ``Geometry``;
- a model: ``detector.Detector``, ``segmenter.Segmenter`` (``.open(model_or_build_dir)``);
- the loop: ``pipeline.Pipeline`` (threads and bounded queues, frames in order) with
  ``stats.PipelineStats``; results out: ``sinks`` (video, JSON Lines, images, window, callback).

OpenCV is imported on first use (``pip install 'edgefuse[vision]'``)::

    from edgefuse.vision.detector import Detector
    from edgefuse.vision.pipeline import Pipeline
    from edgefuse.vision.sinks import JsonlSink
    from edgefuse.vision.sources import open_source

    detector = Detector.open("build/", backends=("acl", "cpu"), conf=0.4)
    summary = Pipeline(open_source("clip.mp4"), detector, [JsonlSink("out.jsonl")]).run()
    print(summary.stats.summary())
"""
