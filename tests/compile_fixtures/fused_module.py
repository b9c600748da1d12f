"""A KernelBench-style module: a library convolution, then a chain Inductor fuses."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.conv(x)
        x = torch.relu(x) + self.bias
        return torch.sigmoid(x) * x


def get_inputs():
    return [torch.rand(2, 3, 12, 10)]


def get_init_inputs():
    return [3, 8, 3, (8, 1, 1)]
