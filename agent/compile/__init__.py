"""The ``compile`` strategy: PyTorch's compiler (Inductor) writes Triton for a PyTorch function or
``nn.Module``; ``standalone`` makes of it a file that runs with Triton and PyTorch alone, and
``strategy`` verifies it like every candidate and hands it to the tuner."""
