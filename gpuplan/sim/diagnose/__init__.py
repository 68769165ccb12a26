"""The five-layer diagnosis: ``walk`` visits the layers in order, keeping each layer's best
change, and ``layers`` says what each layer offers a training or serving setup."""
