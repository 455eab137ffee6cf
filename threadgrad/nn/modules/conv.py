"""``nn.Conv2d``, as torch/nn/modules/conv.py's (its parameters, initialization, repr), over
``F.conv2d`` (one im2col and one matrix product, ops/nn.py)."""
from __future__ import annotations

import math
from typing import Any

from ...engine import creation
from ...engine.tensor import Tensor
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module


def _pair(v: Any) -> tuple:
    return (v, v) if isinstance(v, int) else tuple(v)


class Conv2d(Module):
    """``Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
    groups=1, bias=True, padding_mode='zeros', device=None, dtype=None)``: ``weight``
    ``(out_channels, in_channels // groups, kh, kw)`` kaiming_uniform_(a=sqrt(5)) and ``bias``
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as torch's. ``padding`` an int, a pair, ``'valid'`` or
    ``'same'``; ``dilation``, ``groups``. Padding modes other than zeros raise
    NotImplementedError."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
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
        if padding == "same" and any(s != 1 for s in _pair(stride)):
            raise ValueError("padding='same' is not supported for strided convolutions")
        if padding_mode != "zeros":
            raise NotImplementedError(f"Conv2d: threadgrad does not support padding_mode={padding_mode!r} "
                                      "(only padding_mode='zeros'); see docs/porting.md")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride = _pair(kernel_size), _pair(stride)
        self.padding = padding if isinstance(padding, str) else _pair(padding)
        self.dilation, self.groups, self.padding_mode = _pair(dilation), groups, padding_mode
        self.transposed, self.output_padding = False, (0, 0)
        kw = {"device": device, "dtype": dtype}
        self.weight = Parameter(creation.empty(out_channels, in_channels // groups, *self.kernel_size, **kw))
        if bias:
            self.bias = Parameter(creation.empty(out_channels, **kw))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class ConvTranspose2d(Module):
    """``ConvTranspose2d(in_channels, out_channels, kernel_size, stride=1, padding=0,
    output_padding=0, groups=1, bias=True, dilation=1, padding_mode='zeros', device=None,
    dtype=None)``: ``weight`` ``(in_channels, out_channels // groups, kh, kw)``, initialized as
    torch's (kaiming_uniform_(a=sqrt(5)) over the fan of dim 1, the bias by the same fan);
    ``forward(input, output_size=None)``. No ``groups`` or ``dilation`` (NotImplementedError)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, groups: int = 1, bias: bool = True, dilation: Any = 1,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding = _pair(kernel_size), _pair(stride), _pair(padding)
        self.output_padding, self.dilation = _pair(output_padding), _pair(dilation)
        self.groups, self.padding_mode, self.transposed = groups, padding_mode, True
        kw = {"device": device, "dtype": dtype}
        self.weight = Parameter(creation.empty(in_channels, out_channels // groups, *self.kernel_size, **kw))
        if bias:
            self.bias = Parameter(creation.empty(out_channels, **kw))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    reset_parameters = Conv2d.reset_parameters  # the same rule, over this weight's fans (dim 1 is fan in)

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

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.output_padding != (0, 0):
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class Conv1d(Module):
    """``Conv1d(in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
    bias=True, padding_mode='zeros', device=None, dtype=None)``: ``weight`` ``(out_channels,
    in_channels // groups, k)``, initialized as torch's; F.conv1d (conv2d over a height of 1)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode != "zeros":
            raise NotImplementedError(f"Conv1d: threadgrad does not support padding_mode={padding_mode!r} "
                                      "(only padding_mode='zeros'); see docs/porting.md")
        def single(v: Any) -> tuple:
            return (v,) if isinstance(v, int) else tuple(v)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride = single(kernel_size), single(stride)
        self.padding = padding if isinstance(padding, str) else single(padding)
        self.dilation, self.groups, self.padding_mode = single(dilation), groups, padding_mode
        self.transposed, self.output_padding = False, (0,)
        kw = {"device": device, "dtype": dtype}
        self.weight = Parameter(creation.empty(out_channels, in_channels // groups, *self.kernel_size, **kw))
        if bias:
            self.bias = Parameter(creation.empty(out_channels, **kw))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    reset_parameters = Conv2d.reset_parameters

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.conv1d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,):
            s += f", padding={self.padding}"
        if self.dilation != (1,):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s
