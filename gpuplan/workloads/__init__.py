"""Layer 1, model definition: what is computed. ``ModelConfig`` and its presets (``model``,
``presets``, ``hf_config`` for a config.json), exact parameter counts (``params``), the operators
of a block and a model with their FLOPs and bytes (``ops``, ``operators``, ``attention_block``,
``feed_forward``), and training and KV-cache memory (``memory``). Imports nothing else of gpuplan."""
