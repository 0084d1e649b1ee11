"""A matmul-heavy model small enough to tune in a test."""

import torch


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(256, 512)
        self.fc2 = torch.nn.Linear(512, 256)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def build():
    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(32, 256),)


def build_gemm():
    """The same MLP on 128 rows: every matmul dimension is above DLight's tensor-core threshold (64)."""
    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(128, 256),)


def build_conv():
    """A small convolution net (NCHW, as PyTorch gives it)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3))
    return net.eval(), (torch.randn(1, 3, 16, 16),)
