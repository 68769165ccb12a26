"""One GPU: every one-GPU cost path (a kernel, a decoder layer, a training, prefill or decode step
of a whole model, a vision encoder) as a ``Breakdown`` whose items sum to the predicted time.

``whole_model`` is the front door: ``model_breakdown`` and ``config_breakdown`` price a named
model or a config, ``train --gpus 1`` and the record predictor come through ``one_gpu_training``;
``composite`` (layers, decode steps), ``inference`` (prefill and decode as a stack runs them),
``vision`` (image encoders), ``kernels`` (one kernel), ``compilation`` (layer 4: fusion) and
``breakdown`` (the result type) are what it composes.
"""
