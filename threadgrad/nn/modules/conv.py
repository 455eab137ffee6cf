"""``nn.Conv1d``, ``nn.Conv2d`` and ``nn.ConvTranspose2d``, as torch/nn/modules/conv.py's (their
parameters, initialization, repr), over ``F.conv1d`` / ``F.conv2d`` (one im2col and one matrix
product, ops/nn.py) and ``F.conv_transpose2d``."""
from __future__ import annotations

from typing import Any

from ...engine import creation
from ...engine.tensor import Tensor
from .. import functional as F
from ..parameter import Parameter
from .linear import Linear
from .module import Module


class _ConvNd(Module):
    """What the convolutions share, as torch's ``_ConvNd``: the argument checks, ``weight``
    (``(out, in // groups, *kernel)``, or ``(in, out // groups, *kernel)`` transposed) and
    ``bias``, kaiming_uniform_(a=sqrt(5)) with the bias bound by the weight's fan in, the repr."""

    def __init__(self, dims: int, in_channels: int, out_channels: int, kernel_size: Any, stride: Any, padding: Any,
                 dilation: Any, transposed: bool, output_padding: Any, groups: int, bias: bool, padding_mode: str,
                 device: Any, dtype: Any) -> None:
        super().__init__()

        def tup(v: Any) -> tuple:
            return (v,) * dims if isinstance(v, int) else tuple(v)

        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        valid = {"zeros", "reflect", "replicate", "circular"}
        if padding_mode not in valid:
            raise ValueError(f"padding_mode must be one of {valid}, but got padding_mode='{padding_mode}'")
        if isinstance(padding, str) and padding not in ("valid", "same"):
            raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
        if padding == "same" and any(s != 1 for s in tup(stride)):
            raise ValueError("padding='same' is not supported for strided convolutions")
        if padding_mode != "zeros":
            if transposed:
                raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
            raise NotImplementedError(f"{type(self).__name__}: threadgrad does not support "
                                      f"padding_mode={padding_mode!r} (only padding_mode='zeros'); see docs/porting.md")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride = tup(kernel_size), tup(stride)
        self.padding = padding if isinstance(padding, str) else tup(padding)
        self.dilation, self.transposed, self.output_padding = tup(dilation), transposed, tup(output_padding)
        self.groups, self.padding_mode = groups, padding_mode
        kw = {"device": device, "dtype": dtype}
        shape = (in_channels, out_channels // groups) if transposed else (out_channels, in_channels // groups)
        self.weight = Parameter(creation.empty(*shape, *self.kernel_size, **kw))
        if bias:
            self.bias = Parameter(creation.empty(out_channels, **kw))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    reset_parameters = Linear.reset_parameters  # the same rule over this weight's fans

    def extra_repr(self) -> str:
        dims = len(self.kernel_size)
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * dims:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * dims:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * dims:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvNd):
    """``Conv1d(in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
    bias=True, padding_mode='zeros', device=None, dtype=None)``: F.conv1d (conv2d over a height
    of 1)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__(1, in_channels, out_channels, kernel_size, stride, padding, dilation, False, 0, groups, bias,
                         padding_mode, device, dtype)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.conv1d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Conv2d(_ConvNd):
    """``Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
    groups=1, bias=True, padding_mode='zeros', device=None, dtype=None)``: ``weight``
    ``(out_channels, in_channels // groups, kh, kw)``, as torch's. ``padding`` an int, a pair,
    ``'valid'`` or ``'same'``; ``dilation``, ``groups``. Padding modes other than zeros raise
    NotImplementedError."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__(2, in_channels, out_channels, kernel_size, stride, padding, dilation, False, 0, groups, bias,
                         padding_mode, device, dtype)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class ConvTranspose2d(_ConvNd):
    """``ConvTranspose2d(in_channels, out_channels, kernel_size, stride=1, padding=0,
    output_padding=0, groups=1, bias=True, dilation=1, padding_mode='zeros', device=None,
    dtype=None)``: ``weight`` ``(in_channels, out_channels // groups, kh, kw)`` (its fan in is dim
    1's, as torch's); ``forward(input, output_size=None)``. No ``groups`` or ``dilation``
    (NotImplementedError)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, groups: int = 1, bias: bool = True, dilation: Any = 1,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__(2, in_channels, out_channels, kernel_size, stride, padding, dilation, True, output_padding,
                         groups, bias, padding_mode, device, dtype)

    def forward(self, input: Tensor, output_size: Any = None) -> Tensor:  # noqa: A002
        output_padding = self.output_padding
        if output_size is not None:
            size = tuple(output_size)[-2:]
            smallest = [(input.shape[-2 + d] - 1) * self.stride[d] - 2 * self.padding[d] + self.kernel_size[d]
                        for d in range(2)]
            output_padding = tuple(int(s - m) for s, m in zip(size, smallest))
            for d in range(2):
                if not 0 <= output_padding[d] < max(self.stride[d], self.dilation[d]):
                    raise ValueError(f"requested an output size of {list(size)}, but valid sizes range from "
                                     f"{smallest} to {[m + s - 1 for m, s in zip(smallest, self.stride)]} "
                                     f"(for an input of {list(input.shape[-2:])})")
        return F.conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding, output_padding,
                                  self.groups, self.dilation)
