"""edgefuse.vision: what camera and video programs share, for edgefuse's apps and users' programs.

This is the library. The app logic (config files, the run loop of ``edgefuse detect``/``segment``,
the demo) is ``edgefuse.apps`` and ``edgefuse.demo``; ``apps/`` at the repository root is only the
``python -m`` shell over ``edgefuse.apps``: a change to what a camera program does goes here or in
``edgefuse.apps``, never in ``apps/``. One sub-package per job, so a change has one obvious home:

- ``streams``: frames in and results out: ``sources.open_source`` (camera, file, URL, folder,
  iterable; live sources keep the newest frame, files lose none), ``pipeline.Pipeline`` (threads
  and bounded queues, frames in order), ``stats`` and ``sinks`` (video, JSON Lines, images,
  window, callback);
- ``model``: the model adapter: ``adapter.VisionModel`` opens a model or BUILD_DIR on a backend and
  turns frames into its inputs; ``layouts`` tells an output layout from the shapes;
- ``detect``: output decoding (``decode``), the ``Detector`` and text boxes;
- ``segment``: class maps (``decode``) and the ``Segmenter``;
- ``draw``: annotated frames and the palette;
- ``scenes``: procedural scenes to train and test on (shapes, text) and the sample clip.

The records every stage reads travel with the model and sit below all of this:
``edgefuse.preprocess`` (how a frame becomes the input, the letterbox ``Geometry``),
``edgefuse.model_info`` (the app info) and ``edgefuse.nms``. This package imports none of its
modules, so importing one job does not pull in sessions and threads. OpenCV is imported on first
use (``pip install 'edgefuse[vision]'``)::

    from edgefuse.vision.detect.detector import Detector
    from edgefuse.vision.streams.pipeline import Pipeline
    from edgefuse.vision.streams.sinks import JsonlSink
    from edgefuse.vision.streams.sources import open_source

    detector = Detector.open("build/", backends=("acl", "cpu"), conf=0.4)
    summary = Pipeline(open_source("clip.mp4"), detector, [JsonlSink("out.jsonl")]).run()
    print(summary.stats.summary())
"""
