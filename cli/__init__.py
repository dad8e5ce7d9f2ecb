"""The ``predict`` command line: the top layer, over the runtime (:mod:`predictor`) and the trainer (:mod:`training`)."""
